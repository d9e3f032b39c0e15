"""Report grouping, exit codes, JSON and the site policy (exclude / refuse)."""

from __future__ import annotations

from clusterkit.errors import ExitCode
from clusterkit.preflight.engine import CheckResult, Severity, Status
from clusterkit.preflight.report import NodeResult, NodeStatus, Report, decide

OK = CheckResult("gpu.count", Status.OK, Severity.ERROR, "8 GPUs")
PEERMEM_WARN = CheckResult("ib.peermem", Status.WARN, Severity.WARN, "nvidia_peermem not loaded (no GPUDirect RDMA)")
DOWN = CheckResult("ib.ports", Status.FAIL, Severity.ERROR, "mlx5_3 port 1 DOWN (Disabled)")
SEVEN = CheckResult("gpu.count", Status.FAIL, Severity.ERROR, "7 GPUs, expected 8")


def report(nodes: list[NodeResult], hosts: list[str] | None = None) -> Report:
    r = Report("site", "large-cluster", "ssh", hosts or [n.host for n in nodes])
    for n in nodes:
        r.add(n)
    return r


def healthy(host: str) -> NodeResult:
    return NodeResult(host, True, (OK,))


def test_62_ok_nodes_and_one_bad_one_are_two_groups() -> None:
    nodes = [healthy(f"node{i:03d}") for i in range(1, 64) if i != 17] + [NodeResult("node017", True, (OK, DOWN))]
    r = report(nodes)
    groups = r.groups()
    assert [g.summary() for g in groups] == ["node017: ib.ports: mlx5_3 port 1 DOWN (Disabled)", "62 nodes: ok"]
    assert groups[1].nodeset == "node[001-016,018-063]"
    assert r.failed_nodes() == ["node017"] and r.exit_code() is ExitCode.FAILURE


def test_identical_failures_are_grouped_and_warnings_do_not_fail() -> None:
    r = report([NodeResult("a1", True, (SEVEN,)), NodeResult("a2", True, (SEVEN,)),
                NodeResult("b1", True, (OK, PEERMEM_WARN)), healthy("c1")])
    summaries = [g.summary() for g in r.groups()]
    assert summaries == ["2 nodes (a[1-2]): gpu.count: 7 GPUs, expected 8",
                         "b1: ib.peermem: nvidia_peermem not loaded (no GPUDirect RDMA)", "c1: ok"]
    assert r.ok_nodes() == ["b1", "c1"]
    only_warn = report([NodeResult("b1", True, (OK, PEERMEM_WARN))])
    assert only_warn.exit_code() is ExitCode.OK and only_warn.nodes[0].status is NodeStatus.WARN


def test_unreachable_wins_over_failed() -> None:
    dead = NodeResult("dead", False, error="connection refused by 127.2.0.1:22", error_kind="refused")
    r = report([healthy("n1"), NodeResult("n2", True, (SEVEN,)), dead])
    assert r.exit_code() is ExitCode.UNREACHABLE
    assert r.unreachable_nodes() == ["dead"] and r.bad_nodes() == ["n2", "dead"]
    assert r.groups()[0].summary() == "dead: connection refused by 127.2.0.1:22"
    assert report([healthy("n1")]).exit_code() is ExitCode.OK


def test_interrupted_report_lists_unchecked_nodes() -> None:
    r = report([healthy("n1")], hosts=["n1", "n2", "n3"])
    r.interrupted = True
    d = r.to_dict()
    assert d["unchecked"] == "n[2-3]" and d["interrupted"] is True and d["counts"]["unchecked"] == 2


def test_policy_exclude_refuse_and_limits() -> None:
    r = report([healthy(f"n{i}") for i in range(1, 10)] + [NodeResult("n10", True, (SEVEN,))])
    d = decide(r, "exclude", max_excluded_fraction=0.1)
    assert not d.refuse and d.exclude == ("n10",) and d.reason == "excluding n10 (failed preflight)"
    refused = decide(r, "refuse")
    assert refused.refuse and "preflight.policy is refuse" in refused.reason
    too_many = decide(r, "exclude", max_excluded_fraction=0.05)
    assert too_many.refuse and "more than preflight.max_excluded_fraction=0.05" in too_many.reason
    short = decide(r, "exclude", nodes_needed=10)
    assert short.refuse and short.reason.startswith("only 9 nodes passed preflight, the job needs 10")
    clean = decide(report([healthy("n1")]), "refuse")
    assert not clean.refuse and clean.exclude == ()
    r.interrupted = True
    assert decide(r, "exclude").refuse


def test_every_node_failing_alike_is_no_bad_node_and_refuses_nothing() -> None:
    """nvidia-smi missing on all four nodes (the srun testbed's message): the check's environment.
    Before: 4 nodes failed, more than max_excluded_fraction, the submission refused."""
    smi = CheckResult("gpu.present", Status.FAIL, Severity.ERROR, "nvidia-smi not found (no NVIDIA driver installed?)")
    r = report([NodeResult(f"n{i}", True, (smi,)) for i in range(1, 5)])
    assert r.common_fault == "gpu.present: nvidia-smi not found (no NVIDIA driver installed?)"
    assert r.bad_nodes() == [] and r.exit_code() is ExitCode.FAILURE
    assert [g.status for g in r.groups()] == [NodeStatus.UNJUDGED] and r.counts()["unjudged"] == 4
    for policy in ("exclude", "refuse"):
        d = decide(r, policy, max_excluded_fraction=0.5, nodes_needed=4)
        assert not d.refuse and d.exclude == ()
        assert d.reason.startswith("preflight: the check failed on all 4 nodes alike: gpu.present: nvidia-smi")
    # two different faults, or a node that passed: each node's own
    other = NodeResult("n5", True, (SEVEN,))
    assert report([*r.nodes, other]).common_fault is None
    assert report([*r.nodes, healthy("n6")]).bad_nodes() == ["n1", "n2", "n3", "n4"]


def test_an_srun_step_refused_as_a_whole_is_the_checks_fault_on_one_node_too() -> None:
    # srun's line as a public salloc/srun transcript shows it (2021: `srun -l --ntasks 8 -c 1 hostname`
    # inside `salloc -w node05 -n 2`)
    refused = "srun: error: Unable to create step for job 99825: More processors requested than permitted"
    one = report([NodeResult("node05", False, error=refused, error_kind="launch")])
    assert one.common_fault == refused and one.bad_nodes() == [] and one.exit_code() is ExitCode.FAILURE
    named = "srun: error: Task launch for StepId=1.0 failed on node node05: Communication error"
    assert report([NodeResult("node05", False, error=named, error_kind="launch")]).bad_nodes() == ["node05"]
