"""What a new user met in their first hour (the stage a node count implies, ...), through the
command line as they typed it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ..conftest import assert_one_line_error


def test_nodes_alone_pick_the_stage_that_holds_them(ck, tmp_path: Path) -> None:
    """`render --site S --nodes 4` is a multi-node job, as it is for the Python API."""
    result = ck("render", "--json", "--site", "ib-h100", "--nodes", "4", "--", "python", "t.py", cwd=tmp_path)
    assert result.code == 0, result.err
    assert json.loads(result.out)["stage"] == "multi-node"
    from clusterkit import Site

    assert Site.load("ib-h100").plan(["python", "t.py"], nodes=4).render(write=False).plan.stage == "multi-node"
    many = ck("render", "--json", "--site", "ib-h100", "--nodes", "12", "--", "python", "t.py", cwd=tmp_path)
    assert many.code == 0 and json.loads(many.out)["stage"] == "large-cluster", many.err
    one = ck("render", "--json", "--site", "ib-h100", "--", "python", "t.py", cwd=tmp_path)
    assert one.code == 0 and json.loads(one.out)["stage"] == "single-node", one.err


@pytest.mark.parametrize(("stage", "nodes", "fix"), [("single-node", "4", "multi-node"),
                                                     ("multi-node", "1", "single-node"),
                                                     ("large-cluster", "4", "multi-node")])
def test_a_stage_that_does_not_hold_the_nodes_names_the_one_that_does(ck, tmp_path: Path, stage: str, nodes: str,
                                                                      fix: str) -> None:
    result = ck("render", "--site", "ib-h100", "--stage", stage, "--nodes", nodes, "--", "python", "t.py",
                cwd=tmp_path)
    assert_one_line_error(result, 2, f"--nodes {nodes} is outside stage {stage}", f"use --stage {fix}")
    from clusterkit import Site
    from clusterkit.errors import PlanError

    with pytest.raises(PlanError, match=f"use stage={fix}$"):
        Site.load("ib-h100").plan(["python", "t.py"], stage=stage, nodes=int(nodes)).render(write=False)


def _slurm_site(tmp_path: Path, name: str, extra: str = "") -> Path:
    site = tmp_path / f"{name}.yaml"
    site.write_text(f"name: {name}\nscheduler: {{kind: slurm}}\n"
                    "nodes: {nodelist: 'nosuchnode[1-4].invalid', gpus_per_node: 8}\n" + extra)
    return site


def test_preflight_goes_the_sites_way_to_the_nodes(ck, tmp_path: Path) -> None:
    """preflight.transport: srun in the site file is how `clusterkit preflight` reaches the nodes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"   # a stand-in for Slurm's srun, which needs a cluster: it is asked, and fails
    srun.write_text("#!/bin/sh\necho 'srun: error: stand-in srun, no cluster here' >&2\nexit 1\n")
    srun.chmod(0o755)
    site = _slurm_site(tmp_path, "nossh", "preflight: {transport: srun}\n")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = ck.proc("preflight", "--site", str(site), env=env, cwd=tmp_path)
    # srun refusing the step as a whole is the check's environment, not 4 bad nodes (issue 41 item 9)
    assert result.code == 1 and result.out.startswith("UNJUDGED    4 nodes"), result
    assert "(multi-node, srun)" in result.out and "stand-in srun" in result.out
    assert "cannot resolve" not in result.out and "hint:" not in result.out
    report = json.loads(ck.proc("preflight", "--site", str(site), "--json", env=env, cwd=tmp_path).out)
    assert report["transport"] == "srun"
    over_ssh = ck.proc("preflight", "--site", str(site), "--transport", "ssh", env=env, cwd=tmp_path)
    assert "(multi-node, ssh)" in over_ssh.out and "stand-in srun" not in over_ssh.out


def test_preflight_that_reaches_no_node_over_ssh_says_what_to_try(ck, tmp_path: Path) -> None:
    result = ck.proc("preflight", "--site", str(_slurm_site(tmp_path, "ssh-site")), cwd=tmp_path)
    assert result.code == 3 and result.out.count("UNREACHABLE") == 4, result
    assert ("hint: 4 of 4 nodes did not answer over SSH; where compute nodes take no SSH, check them through "
            "Slurm: --transport srun, or preflight.transport: srun in the site file") in result.out


def test_readme_shows_the_cpu_only_torch_install_beside_command_one() -> None:
    """Set-up command 1 stays as it is; its CPU-only alternative installs torch from PyTorch's CPU
    index first, then runs the same command 1."""
    import re
    import shlex

    from ..conftest import REPO

    setup = (REPO / "README.md").read_text().split("## Set-up: two commands", 1)[1].split("**2.", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", setup, re.S)
    command_one = "pip install '.[examples]' && clusterkit submit --site local --wait -- python examples/allreduce.py"
    assert blocks[0].strip() == command_one
    cpu = blocks[1].strip().splitlines()
    assert shlex.split(cpu[0]) == ["pip", "install", "--index-url", "https://download.pytorch.org/whl/cpu", "torch"]
    assert cpu[1:] == [command_one]
    extra = re.search(r'examples = \["(torch[^"]*)"', (REPO / "pyproject.toml").read_text())
    assert extra and extra.group(1) == "torch>=2.1"   # a +cpu wheel satisfies it: pip keeps the CPU build


def test_sites_init_out_creates_its_folder(ck, tmp_path: Path) -> None:
    """The README's own example, in a checkout with no site_configs/ yet."""
    result = ck("sites", "init", "mycluster", "--from-example", "ib-h100", "--out", "site_configs/mycluster.yaml",
                cwd=tmp_path)
    assert result.code == 0, result.err
    written = tmp_path / "site_configs" / "mycluster.yaml"
    assert "name: mycluster" in written.read_text()
    assert ck("sites", "validate", str(written)).code == 0


def test_sites_help_shows_whole_summaries_and_the_top_level_names_init_and_drift(ck) -> None:
    top = ck("--help")
    (line,) = [ln for ln in top.out.splitlines() if ln.strip().startswith("sites ")]
    assert "init" in line and "drift" in line, top.out
    group = ck("sites", "--help").out
    commands = group.split("Commands:", 1)[1].split("Exit codes", 1)[0]
    rows = [ln.split(None, 1) for ln in commands.splitlines() if ln.strip()]
    assert [r[0] for r in rows] == ["drift", "init", "list", "schema", "show", "validate"]
    assert all(not r[1].endswith("...") for r in rows), commands


def test_sites_list_marks_the_built_in_examples(ck, tmp_path: Path) -> None:
    (tmp_path / "site_configs").mkdir()
    (tmp_path / "site_configs" / "prod.yaml").write_text(
        "name: prod\nscheduler: {kind: slurm}\nnodes: {nodelist: 'g[1-2]', gpus_per_node: 8}\n")
    listed = ck("sites", "list", "--json", cwd=tmp_path)
    by_name = {r["name"]: r for r in json.loads(listed.out)}
    assert by_name["prod"]["example"] is False and by_name["local"]["example"] is False
    assert by_name["ib-h100"]["example"] is True
    table = ck("sites", "list", cwd=tmp_path).out.splitlines()
    assert [ln.split()[1] for ln in table if ln.startswith("ib-h100 ")] == ["built-in"]
    assert any(ln.startswith("ib-h100 ") and "built-in example" in ln for ln in table)
    assert not any(ln.startswith("prod ") and "example" in ln for ln in table)


def test_every_key_of_the_site_schema_is_described(ck) -> None:
    schema = json.loads(ck("sites", "schema").out)
    bare = [f"{name}.{key}" for name, body in [("Site", schema), *schema["$defs"].items()]
            for key, prop in body.get("properties", {}).items() if not prop.get("description")]
    assert bare == []


def test_drift_all_leaves_the_built_in_examples_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the drift seam (Slurm's answers captured from 22.05): the admin's site is checked,
    and no built-in example is listed as skipped."""
    from clusterkit.sites import admin
    from tests.sites.test_admin import slurm

    draft = admin.init_site("tb", partition=None, nodes=None, probe_with=None, run=slurm())
    (tmp_path / "site_configs").mkdir()
    (tmp_path / "site_configs" / "tb.yaml").write_text(draft.text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLUSTERKIT_SITES", raising=False)
    run = admin.drift_sites([], every=True, run=slurm())
    assert [r.site for r in run.reports] == ["tb"], run
    assert run.skipped == [], run.skipped


def test_doctor_advice_names_the_node_it_knows(ck) -> None:
    """A real log (NVIDIA/nccl-tests issue 188, its host named "user"): the advice names that node;
    where no node is known the placeholder stays NODE."""
    from ..conftest import REPO

    corpus = REPO / "tests" / "diagnose" / "corpus"
    known = ck("doctor", "--logs", str(corpus / "nccltests-188-socket-accept.log"))
    assert known.code == 1 and "  node user" in known.out, known   # 1: a failure found
    assert "advice: exclude the node and check its links: clusterkit preflight --nodelist user" in known.out
    assert "NODE" not in known.out
    unknown = ck("doctor", "--logs", str(corpus / "awsome-203-ofi-mr.log"))
    assert "resubmit with --exclude NODE" in unknown.out and "\n  node " not in unknown.out, unknown


COMMANDS = [(), ("submit",), ("render",), ("status",), ("logs",), ("cancel",), ("doctor",), ("plan",), ("preflight",),
            ("sites",), ("sites", "init"), ("sites", "drift"), ("sites", "list"), ("sites", "show"),
            ("sites", "validate"), ("sites", "schema"), ("choose-nodes",)]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) or "clusterkit" for c in COMMANDS])
def test_help_fits_80_columns(ck, command: tuple[str, ...]) -> None:
    result = ck.proc(*command, "--help", env={"COLUMNS": "80"})
    assert result.code == 0, result.err
    wide = [line for line in result.out.splitlines() if len(line) > 80]
    assert wide == [], wide


def test_a_single_node_slurm_job_requeues_like_a_multi_node_one(ck, tmp_path: Path) -> None:
    result = ck("submit", "--dry-run", "--no-snapshot",
                "--site", "ib-h100", "--set", "max_restarts=3", "--", "python", "t.py",
                cwd=tmp_path)
    assert result.code == 0, result.err
    assert "restarts 3 (flag)" in result.err and "no requeue" not in result.err
    for line in ("#SBATCH --signal=B:USR2@120", "#SBATCH --requeue", "ck_max_restarts=3 ",
                 "(restart $ck_restarts of at most $ck_max_restarts)"):
        assert line in result.out, line


def test_a_single_node_launcher_outside_slurms_steps_says_it_does_not_requeue(ck, tmp_path: Path) -> None:
    """horovod starts its workers itself: no warning can reach them, so no requeue, and the job says so."""
    result = ck("submit", "--dry-run", "--no-snapshot",
                "--site", "ib-h100", "--launcher", "horovod", "--", "python", "t.py",
                cwd=tmp_path)
    assert result.code == 0, result.err
    assert "restarts none (horovod runs outside Slurm's steps)" in result.err
    assert "#SBATCH --requeue" not in result.out and "ck_max_restarts=0 " in result.out
    assert "of at most" not in result.out
    assert "(no requeue: horovod starts its workers outside Slurm's job steps)" in result.out
    asked = ck("submit", "--dry-run", "--no-snapshot",
               "--site", "ib-h100", "--launcher", "horovod", "--set", "max_restarts=2",
               "--", "python", "t.py", cwd=tmp_path)
    assert_one_line_error(asked, 2, "horovod starts its workers over SSH from the batch host",
                          "use --set max_restarts=0")
