"""Where a Slurm job's nodes are checked by default, and which nodes a before-submit check reads.

The job checks its own nodes as its first step (srun inside its allocation: no SSH to compute
nodes needed); ``submit`` checks before queueing only where the site sets
``preflight.before_submit: true`` or ``--preflight-transport`` asks, and then only the nodes the
job could get.  Which those are comes from Slurm through one seam; here that seam reads
``scontrol -o`` text captured on the Slurm 22.05 testbed (``tests/data/sites/README.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from clusterkit.actions import nodes_to_check, preflight_gate
from clusterkit.config.load import load_site
from clusterkit.errors import PlanError
from clusterkit.job.request import JobRequest
from tests.conftest import make_plan

from ..conftest import REPO

CAPTURED = REPO / "tests" / "data" / "sites" / "slurm-22.05"

SITE = """\
name: tb
scheduler: {{kind: slurm, time: "00:05:00"{partition}}}
nodes: {{nodelist: "node[1-4]", gpus_per_node: 8, cpus_per_node: 8}}
storage:
  - {{path: /tmp, type: local, shared: true}}
"""


def _site(tmp_path: Path, partition: str = ""):
    path = tmp_path / "tb.yaml"
    path.write_text(SITE.format(partition=f", partition: {partition}" if partition else ""))
    return load_site(str(path))


def _captured(nodes_file: str):
    calls: list[tuple[str, ...]] = []

    def run(argv: Sequence[str]) -> str:
        calls.append(tuple(argv))
        name = {"partition": "show-partition-o.txt", "node": nodes_file}[argv[2]]
        return (CAPTURED / name).read_text()

    return run, calls


def _plan(site, nodes: int = 1):
    stage = "single-node" if nodes == 1 else "multi-node"
    return make_plan(site, JobRequest(stage=stage, command=("python", "t.py"), nodes=nodes, run_dir="/tmp/r"))


def test_only_idle_and_mixed_nodes_of_the_partition_are_checked(tmp_path: Path) -> None:
    site = _site(tmp_path)
    run, calls = _captured("show-node-o-down-drain.txt")   # node2 DOWN, node3 IDLE+DRAIN
    hosts, note = nodes_to_check(site, _plan(site), run)
    assert hosts == ["node1", "node4"]
    assert note == ("checking 2 of 4 candidate node(s): those of partition debug that are idle or mixed "
                    "(not drained, down or allocated)")
    assert calls == [("scontrol", "show", "partition", "-o"), ("scontrol", "show", "node", "-o")]


def test_the_plans_exclude_list_still_applies(tmp_path: Path) -> None:
    site = _site(tmp_path, partition="debug")
    run, _ = _captured("show-node-o.txt")
    plan = make_plan(site, JobRequest(stage="single-node", command=("python", "t.py"), exclude=("node1",),
                                      run_dir="/tmp/r"))
    hosts, _ = nodes_to_check(site, plan, run)
    assert hosts == ["node2", "node3", "node4"]


def test_a_partition_slurm_does_not_have_is_named(tmp_path: Path) -> None:
    site = _site(tmp_path, partition="gpu")
    run, _ = _captured("show-node-o.txt")
    with pytest.raises(PlanError, match=r"partition gpu is not among the cluster's partitions \(debug\)"):
        nodes_to_check(site, _plan(site), run)


def test_slurm_sites_check_in_the_job_by_default(tmp_path: Path) -> None:
    site = _site(tmp_path)
    assert site.preflight.in_job is True and site.preflight.before_submit is False
    plan = _plan(site, 2)
    assert plan.preflight_in_job
    gate = preflight_gate(site, plan, slurm=_captured("show-node-o.txt")[0])   # contacts nothing
    assert gate.report is None and gate.plan is plan
    assert gate.skipped == "site tb does not set preflight.before_submit: true (the job checks its own nodes first)"


def test_shipped_slurm_sites_render_the_in_job_check(ck, tmp_path: Path) -> None:
    out = tmp_path / "r"
    result = ck("render", "--site", "eth-nfs", "--out", str(out), "--", "python", "t.py")
    assert result.code == 0, result.err
    script = (out / "job.sbatch").read_text()
    # the supervisor's start runs the preflight on the allocation (--transport=srun) before the launch
    assert '"$ck_python" -m clusterkit.supervise.start --site ' in script
    assert script.index("-m clusterkit.supervise.start") < script.index("# ---- launch:")


def test_a_local_site_has_no_in_job_check(tmp_path: Path) -> None:
    site = load_site("local")
    assert not make_plan(site, JobRequest(stage="single-node", command=("python", "t.py"),
                                          run_dir=str(tmp_path))).preflight_in_job


def test_no_free_node_means_nothing_to_check(tmp_path: Path) -> None:
    site = _site(tmp_path)
    text = (CAPTURED / "show-node-o.txt").read_text().replace("State=IDLE", "State=ALLOCATED")

    def run(argv: Sequence[str]) -> str:
        return (CAPTURED / "show-partition-o.txt").read_text() if argv[2] == "partition" else text

    gate = preflight_gate(site, _plan(site), transport="ssh", slurm=run)
    assert gate.report is None and gate.skipped is not None and "none is free now" in gate.skipped
