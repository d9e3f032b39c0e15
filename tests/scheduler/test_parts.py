"""Each scheduler owns its share of a plan (``scheduler.parts``): its directives and its job
script's entry template; planning is handed it and names no scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit import scheduler
from clusterkit.config.load import load_site
from clusterkit.job import plan as planning
from clusterkit.job.request import JobRequest
from tests.conftest import REPO, make_plan

SITE = """\
name: tb
scheduler: {kind: slurm, time: "00:30:00"}
nodes: {nodelist: "node[1-4]", gpus_per_node: 8, cpus_per_node: 8}
network: {topology: {plugin: tree, max_switches: 1}}
storage:
  - {path: /tmp, type: local, shared: true}
"""


def _request(**kw: object) -> JobRequest:
    return JobRequest(stage="multi-node", command=("python", "t.py"), nodes=2, run_dir="/tmp/ck-parts",
                      **kw)  # type: ignore[arg-type]


def test_each_kind_has_its_own_entry_template() -> None:
    assert (scheduler.parts("slurm").entry, scheduler.parts("local").entry) == ("job.sbatch.j2", "job.local.j2")
    assert scheduler.parts("slurm").allocates and not scheduler.parts("local").allocates
    for kind in ("slurm", "local"):
        assert (REPO / "templates" / scheduler.parts(kind).entry).is_file()
    with pytest.raises(ValueError, match="unknown scheduler kind"):
        scheduler.parts("pbs")


def test_slurm_adds_its_own_lines_to_the_request_both_record(tmp_path: Path) -> None:
    path = tmp_path / "tb.yaml"
    path.write_text(SITE)
    site = load_site(str(path))
    plan = make_plan(site, _request(run_name="r1"))
    r, launch = plan.basis.resolved, plan.launch
    slurm = scheduler.parts("slurm").directives(site, r, 2, 8, launch, ())
    common = scheduler.parts("local").directives(site, r, 2, 8, launch, ())
    assert plan.sbatch == slurm
    own = [k for k, _ in slurm if k not in dict(common)]
    assert own == ["no-kill", "switches", "comment"]
    assert [d for d in slurm if d[0] not in own] == list(common)   # the common request, in its order


def test_a_plan_is_refused_another_kind_s_parts(tmp_path: Path) -> None:
    path = tmp_path / "tb.yaml"
    path.write_text(SITE)
    with pytest.raises(ValueError, match="a local scheduler for a slurm site"):
        planning.make_plan(load_site(str(path)), _request(), scheduler.parts("local"))
