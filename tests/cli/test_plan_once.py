"""A command plans once: nodes preflight finds bad are taken out with ``Plan.excluding``, which
gives exactly what ``make_plan`` gives with them in the request's exclude list."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from clusterkit.config.load import load_file
from clusterkit.config.schema import Site
from clusterkit.errors import PlanError
from clusterkit.job import plan as planning
from clusterkit.job import render as render_mod
from clusterkit.job import request as request_mod
from clusterkit.job.request import JobRequest, Resolved, job_name, resolve
from clusterkit.job.scheduling import SchedulerParts
from tests.conftest import REPO, make_plan, shared_site

SITES = ["local", "testbed", "eth-nfs", "ib-h100", "roce-a100"]
STAGES = {"single-node": 1, "multi-node": 3, "large-cluster": 10}
LAUNCHERS = ["torchrun", "deepspeed", "horovod", "accelerate", "megatron", "colossalai", "srun"]
EXTRA: dict[str, dict[str, object]] = {"megatron": {"tp": 2, "pp": 2}, "deepspeed": {"zero_stage": 3},
                                       "horovod": {"max_restarts": 0}, "colossalai": {"max_restarts": 0}}


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Site, Path]]:
    """Each example site with a temporary directory declared shared (multi-node run directories)."""
    tmp = tmp_path_factory.mktemp("plan-once")
    out: dict[str, tuple[Site, Path]] = {}
    for name in SITES:
        shared = tmp / name
        shared.mkdir()
        out[name] = (load_file(str(shared_site(tmp / "sites", name, shared))), shared)
    return out


def _plan_or_error(site: Site, request: JobRequest) -> planning.Plan | str:
    try:
        return make_plan(site, request)
    except PlanError as exc:
        return f"PlanError: {exc}"


def _excluding_or_error(plan: planning.Plan, nodes: tuple[str, ...]) -> planning.Plan | str:
    try:
        return plan.excluding(nodes)
    except PlanError as exc:
        return f"PlanError: {exc}"


def _exclusions(hosts: list[str], nnodes: int) -> list[tuple[str, ...]]:
    """The first host, the last, one in the middle, two, and one too many for the job."""
    sets = [(hosts[0],), (hosts[-1],), (hosts[len(hosts) // 2],), tuple(hosts[1:3])]
    sets.append(tuple(hosts[: len(hosts) - nnodes + 1]))
    return [s for s in dict.fromkeys(sets) if s]


CASES = [(s, st, la) for s in SITES for st in STAGES for la in LAUNCHERS]


@pytest.mark.parametrize("site_name,stage,launcher", CASES, ids=["-".join(c) for c in CASES])
def test_excluding_equals_planning_with_the_exclude_list(sites, site_name: str, stage: str, launcher: str) -> None:
    site, shared = sites[site_name]
    nnodes = min(STAGES[stage], len(site.nodes.hosts))
    request = JobRequest(stage=stage, command=("python", "train.py", "--lr", "3e-4"), launcher=launcher,
                         nodes=nnodes, job_name="once", settings=EXTRA.get(launcher, {}), run_dir=str(shared / "run"))
    plan = _plan_or_error(site, request)
    hosts = list(site.nodes.hosts)
    if isinstance(plan, str):  # not a combination this site serves: excluding nodes cannot make it one
        for nodes in _exclusions(hosts, nnodes):
            assert isinstance(_plan_or_error(site, replace(request, exclude=nodes)), str), (plan, nodes)
        return
    for nodes in _exclusions(hosts, nnodes):
        derived = _excluding_or_error(plan, nodes)
        planned = _plan_or_error(site, replace(request, exclude=nodes))
        assert derived == planned, nodes
        if not isinstance(planned, str):
            assert not isinstance(derived, str)
            assert render_mod.render(site, derived) == render_mod.render(site, planned)   # hostfile included
            assert derived.to_dict() == planned.to_dict()


def test_excluding_adds_to_the_exclude_list_already_given(sites) -> None:
    site, shared = sites["ib-h100"]
    hosts = list(site.nodes.hosts)
    request = JobRequest(stage="multi-node", command=("python", "t.py"), nodes=4, run_dir=str(shared / "r"),
                         exclude=(hosts[5],))
    both = tuple(sorted({hosts[5], hosts[0]}))
    assert make_plan(site, request).excluding([hosts[0]]) == make_plan(site, replace(request, exclude=both))
    plan = make_plan(site, request)
    assert plan.excluding([]) is plan and plan.excluding([hosts[5]]) is plan


def test_excluding_refuses_as_planning_does(sites) -> None:
    site, shared = sites["testbed"]
    request = JobRequest(stage="multi-node", command=("python", "t.py"), nodes=3, run_dir=str(shared / "r"))
    plan = make_plan(site, request)
    with pytest.raises(PlanError, match=r"cannot exclude node9: not in testbed's nodelist node\[1-4\]"):
        plan.excluding(["node9"])
    with pytest.raises(PlanError, match="3 nodes requested but only 2 of testbed's nodes remain after excluding 2"):
        plan.excluding(["node1", "node2"])


def test_excluding_rechecks_deepspeed_host_filters(sites) -> None:
    """A deepspeed include that names a node now excluded is refused, as make_plan refuses it."""
    site, shared = sites["testbed"]
    request = JobRequest(stage="multi-node", command=("python", "t.py"), launcher="deepspeed", nodes=2,
                         settings={"include": "node1@node2"}, run_dir=str(shared / "r"))
    plan = make_plan(site, request)
    with pytest.raises(PlanError) as derived:
        plan.excluding(["node1"])
    with pytest.raises(PlanError) as planned:
        make_plan(site, replace(request, exclude=("node1",)))
    assert str(derived.value) == str(planned.value) and "node1 is not one of the site's nodes" in str(derived.value)
    later = plan.excluding(["node4"])   # a node the filter does not name: fine
    assert later.exclude == ("node4",) and ("exclude", "node4") in later.sbatch
    assert plan.candidates == ("node1", "node2", "node3", "node4") and later.candidates == ("node1", "node2", "node3")


def test_plan_json_has_no_basis(sites) -> None:
    site, shared = sites["testbed"]
    plan = make_plan(site, JobRequest(stage="multi-node", command=("python", "t.py"), nodes=2, run_dir=str(shared)))
    doc = plan.to_dict()
    assert "basis" not in doc and json.loads(json.dumps(doc))["hosts"] == ["node1", "node2"]


def test_job_name_and_launcher_are_known_before_planning(sites) -> None:
    site, shared = sites["ib-h100"]
    request = JobRequest(stage="multi-node", command=("python", "-u", "train/main.py", "--x"), nodes=2,
                         run_dir=str(shared))
    plan = make_plan(site, request)
    resolved = resolve(site, request, allocates=True)
    assert job_name(request) == resolved.job_name == plan.job_name == "ck-main"
    assert resolved.launcher == plan.launcher
    with pytest.raises(PlanError, match=r"^job_name='bad name': use 1-64") as err:
        job_name(replace(request, job_name="bad name"))
    assert err.value.field == "job_name"


# -- one make_plan per command ---------------------------------------------------------------

SITE_WITH_PREFLIGHT = """\
extends: {base}
name: testbed-gated
preflight: {{before_submit: true, policy: exclude, max_excluded_fraction: 0.5}}
"""


@pytest.fixture
def plan_calls(monkeypatch: pytest.MonkeyPatch) -> list[JobRequest]:
    calls: list[JobRequest] = []
    real = planning.make_plan

    def counting(site: Site, request: JobRequest | Resolved, scheduler: SchedulerParts) -> planning.Plan:
        calls.append(request.request if isinstance(request, Resolved) else request)
        return real(site, request, scheduler)

    monkeypatch.setattr(planning, "make_plan", counting)
    return calls


def test_render_plans_once(ck, tmp_path: Path, plan_calls: list[JobRequest]) -> None:
    res = ck("render", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--launcher", "deepspeed",
             "--out", str(tmp_path / "run"), "--", "python", "train.py")
    assert res.code == 0, res.err
    assert len(plan_calls) == 1 and plan_calls[0].run_dir == str(tmp_path / "run")


def test_submit_dry_run_plans_once(ck, tmp_path: Path, plan_calls: list[JobRequest]) -> None:
    res = ck("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--dry-run", "--no-snapshot",
             "--out", str(tmp_path / "run"), "--", "python", "train.py")
    assert res.code == 0, res.err
    assert len(plan_calls) == 1


@pytest.fixture
def resolve_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often a command works out the job name and looks up the site's stage entry."""
    counts = {"job_name": 0, "stage_override": 0}
    real_name, real_override = request_mod.job_name, Site.stage_override

    def name(request: JobRequest) -> str:
        counts["job_name"] += 1
        return real_name(request)

    def override(self: Site, stage: str) -> object:
        counts["stage_override"] += 1
        return real_override(self, stage)

    monkeypatch.setattr(request_mod, "job_name", name)
    monkeypatch.setattr(Site, "stage_override", override)
    return counts


@pytest.mark.parametrize("command", [
    ("render", "--launcher", "deepspeed"),
    ("submit", "--dry-run", "--no-snapshot", "--set", "time=01:00:00"),
    ("plan", "--render", "--model-params", "1e9"),
], ids=lambda c: " ".join(c[:2]))
def test_the_request_is_resolved_once(ck, tmp_path: Path, resolve_calls: dict[str, int],
                                      plan_calls: list[JobRequest], command: tuple[str, ...]) -> None:
    args = [command[0], "--site", "testbed", "--stage", "multi-node", "--nodes", "2", *command[1:],
            "--out", str(tmp_path / "run"), "--", "python", "train.py"]
    if command[0] == "plan":
        args = [command[0], "--site", "testbed", *command[1:], "--out", str(tmp_path / "run"), "--", "python",
                "train.py"]
    res = ck(*args)
    assert res.code == 0, res.err
    assert resolve_calls == {"job_name": 1, "stage_override": 1}
    assert len(plan_calls) == 1


def test_precedence_by_setting_name(sites) -> None:
    """--set, then the site's stages.<stage>, then the site, for every setting a site can set."""
    from clusterkit.config.schema import StageOverride

    site, shared = sites["testbed"]
    entry = StageOverride(time="02:00:00", max_restarts=2, partition="staged", launcher="deepspeed", nodes=3,
                          container=False)
    staged = site.model_copy(update={"stages": {"multi-node": entry}})
    req = JobRequest(stage="multi-node", command=("python", "t.py"), run_dir=str(shared))
    r = resolve(staged, req, allocates=True)
    assert (r.time, r.max_restarts, r.partition, r.launcher, r.nodes, r.container) == \
        ("02:00:00", 2, "staged", "deepspeed", 3, False)
    given = resolve(staged, replace(req, launcher="torchrun", nodes=2, settings={
        "time": "00:30:00", "max_restarts": "0", "partition": "mine", "container": "true"}), allocates=True)
    assert (given.time, given.max_restarts, given.partition, given.launcher, given.nodes, given.container) == \
        ("00:30:00", 0, "mine", "torchrun", 2, True)
    bare = resolve(site.model_copy(update={"stages": {}}), req, allocates=True)
    assert (bare.time, bare.max_restarts, bare.partition, bare.launcher, bare.nodes, bare.container) == \
        (site.scheduler.time, site.scheduler.max_restarts, site.scheduler.partition, "torchrun", None, True)
    other_stage = resolve(staged, replace(req, stage="single-node"), allocates=True)   # another stage's entry: not read
    assert (other_stage.time, other_stage.partition) == (site.scheduler.time, site.scheduler.partition)


# a value of each key of a site's stages.<stage> entry but job (test_job_setup), none the testbed's own
STAGE_VALUES: dict[str, object] = {"launcher": "deepspeed", "nodes": 3, "time": "02:00:00", "partition": "staged",
                                   "max_restarts": 2, "container": False, "gpu_bind": "task", "snapshot": False,
                                   "spares": 2}


def test_every_stage_key_is_chosen_by_the_precedence_rule(sites) -> None:
    """A key a stage may set is the stage's choice where the job gives none, its source "stage"."""
    from clusterkit.config.schema import StageOverride

    assert set(StageOverride.model_fields) - {"job"} == set(STAGE_VALUES)
    site, shared = sites["testbed"]
    entry = StageOverride(**STAGE_VALUES)
    r = resolve(site.model_copy(update={"stages": {"multi-node": entry}}),
                JobRequest(stage="multi-node", command=("python", "t.py"), run_dir=str(shared)), allocates=True)
    chosen = {key: getattr(r, "stage_spares" if key == "spares" else key) for key in STAGE_VALUES}
    assert chosen == STAGE_VALUES
    assert {key: r.sources[key] for key in STAGE_VALUES if key != "snapshot"} == \
        dict.fromkeys(set(STAGE_VALUES) - {"snapshot"}, "stage")


def test_account_qos_and_gpus_per_node_by_the_precedence_rule(sites) -> None:
    site, shared = sites["testbed"]
    sch = site.scheduler
    req = JobRequest(stage="multi-node", command=("python", "t.py"), run_dir=str(shared))

    def chosen(on: Site, request: JobRequest) -> tuple[object, ...]:
        r = resolve(on, request, allocates=True)
        return r.account, r.qos, r.sources["account"], r.sources["qos"], r.sources["gpus_per_node"]

    own = site.model_copy(update={"scheduler": sch.model_copy(update={"account": "proj", "qos": "high"})})
    assert chosen(own, req) == ("proj", "high", "site", "site", "site")
    assert chosen(own, replace(req, gpus_per_node=2, settings={"account": "mine", "qos": "low"})) == \
        ("mine", "low", "flag", "flag", "flag")
    # an empty one given is none given: the site's, from the site
    assert chosen(own, replace(req, settings={"account": "", "qos": ""})) == ("proj", "high", "site", "site", "site")
    bare = site.model_copy(update={"scheduler": sch.model_copy(update={"account": None, "qos": None})})
    assert chosen(bare, req) == (None, None, "default", "default", "site")


def _fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sbatch (and scontrol) answer as Slurm does; no job runs."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 'Submitted batch job 4242'\n")
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    # the nodes a before-submit preflight may check: scontrol's answer captured on the testbed
    captured = REPO / "tests" / "data" / "sites" / "slurm-22.05"
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\ncase "$2" in\n  partition) cat "{captured}/show-partition-o.txt";;\n'
                                      f'  node) cat "{captured}/show-node-o.txt";;\n  *) exit 1;;\nesac\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path / "state"))


def _fake_preflight(monkeypatch: pytest.MonkeyPatch, bad: set[str], seen: list[dict[str, object]]) -> None:
    """Preflight finds ``bad`` unreachable and every other candidate node fine."""
    from clusterkit import hostlist
    from clusterkit.preflight import run as preflight_run
    from clusterkit.preflight.report import NodeResult, Report

    def run_preflight(site: Site, stage: str | None = None, nodes: str | None = None, transport: str = "ssh",
                      **_: object) -> Report:
        hosts = hostlist.expand(nodes or "")
        seen.append({"stage": stage, "nodes": hosts})
        report = Report(site.name, stage or "", transport, hosts)
        for h in hosts:
            report.add(NodeResult(h, reachable=h not in bad, error="timed out" if h in bad else None))
        return report

    monkeypatch.setattr(preflight_run, "run_preflight", run_preflight)


def test_submit_plans_once_and_preflight_excludes_from_that_plan(ck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                plan_calls: list[JobRequest]) -> None:
    site = tmp_path / "gated.yaml"
    site.write_text(SITE_WITH_PREFLIGHT.format(base=REPO / "site_configs" / "testbed.yaml"))
    _fake_slurm(tmp_path, monkeypatch)
    seen: list[dict[str, object]] = []
    _fake_preflight(monkeypatch, {"node2"}, seen)
    run_dir = tmp_path / "run"
    res = ck("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--exclude", "node4",
             "--launcher", "deepspeed", "--no-snapshot", "--out", str(run_dir), "--", "python", "train.py")
    assert res.code == 0, res.err
    assert len(plan_calls) == 1
    assert seen == [{"stage": "multi-node", "nodes": ["node1", "node2", "node3"]}]   # node4 was excluded already
    assert "preflight: keeping node2 out of the job (#SBATCH --exclude)" in res.err
    assert "Submitted job 4242" in res.out
    script = (run_dir / "job.sbatch").read_text()
    assert "#SBATCH --exclude=node[2,4]\n" in script
    doc = json.loads((run_dir / "plan.json").read_text())
    assert doc["exclude"] == ["node2", "node4"] and doc["hosts"] == ["node1", "node3"]
    assert (run_dir / "hostfile").read_text() == "node1 slots=8\nnode3 slots=8\n"


def test_submit_refused_by_preflight_leaves_no_run_directory(ck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            plan_calls: list[JobRequest]) -> None:
    site = tmp_path / "gated.yaml"
    site.write_text(SITE_WITH_PREFLIGHT.format(base=REPO / "site_configs" / "testbed.yaml"))
    _fake_slurm(tmp_path, monkeypatch)
    _fake_preflight(monkeypatch, {"node1", "node2", "node3"}, [])
    (tmp_path / "train.py").write_text("")   # in the snapshot, whose objects go to ./runs too (no shared store)
    res = ck("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--", "python", "train.py",
             cwd=tmp_path)
    assert res.code == 3, res.err   # unreachable nodes: exit 3
    assert "clusterkit: error: preflight: not submitting" in res.err and "UNREACHABLE" in res.err
    assert len(plan_calls) == 1
    assert not (tmp_path / "runs").exists()   # the default run directory (and ./runs) is released


def test_a_refused_render_removes_only_what_it_created(ck, tmp_path: Path) -> None:
    """The run directory is resolved before planning; a plan error removes it (and ./runs when made
    for it), never a ./runs that was there before."""
    bad = ("render", "--site", "testbed", "--stage", "multi-node", "--nodes", "9", "--", "python", "t.py")
    res = ck(*bad, cwd=tmp_path)
    assert res.code == 2 and "--nodes 9" in res.err
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "runs").mkdir()
    res = ck(*bad, cwd=tmp_path)
    assert res.code == 2 and list((tmp_path / "runs").iterdir()) == []
