"""The performance check after a hang that named no node (supervise/hangcheck.py): its reports
are ``preflight --perf --json``'s, made by the real judge from the figures recorded on the 5-node
testbed (tests/data/captures/perf: node3's link limited, node3-node4 only, the healthy run), and
what recovery does with what it finds."""

from __future__ import annotations

import json
from typing import Any

from clusterkit.preflight.perf import judge, parse_output
from clusterkit.supervise import hangcheck, recovery, replan, stall, watch
from tests.preflight.test_perf import HOSTS, LIMITS, _judge, _rewrite

NODES, SPARES = ("node1", "node2", "node3", "node4"), ("node5",)
STALL = watch.stalled_verdict(stall.Stall(65.0, 60.0, 12, "train"))


def _report(name: str, edit: Any = None) -> str:
    return json.dumps(_judge(name, edit=edit).to_dict())


def _run() -> recovery.Run:
    return recovery.Run("7", "/nonexistent", 0, (*NODES, *SPARES), NODES, SPARES, 3)


def test_one_node_with_a_limited_link_is_the_node_behind_and_recovery_drops_it() -> None:
    found = hangcheck.finding(_report("node3-link-100mbit"), NODES, SPARES)
    assert found.node == "node3" and found.spares == ()
    assert found.said.startswith("node3 below par (slow") and "with every peer low" in found.said
    v = hangcheck.with_finding(STALL, found)
    assert v.node == "node3" and v.category == "stall" and "unknown" not in v.summary
    assert v.summary.startswith("no progress since step 12 for 65 s")
    assert "by the performance check after the hang" in v.summary
    step = replan.next_step(v, [], replan.Attempted(0, NODES, SPARES, 3, allocation=(*NODES, *SPARES)))
    assert isinstance(step, replan.Relaunch) and step.nodes == ("node1", "node2", "node4", "node5")
    assert [h for h, _ in step.dropped] == ["node3"]


def test_a_healthy_allocation_names_none_and_recovery_goes_on_as_before() -> None:
    found = hangcheck.finding(_report("healthy"), NODES, SPARES)
    assert (found.node, found.said) == (None, "no node below par")
    v = hangcheck.with_finding(STALL, found)
    assert v.node is None and v.summary.endswith("; performance check after the hang: no node below par")
    before = replan.next_step(STALL, [], replan.Attempted(0, NODES, SPARES, 3, allocation=(*NODES, *SPARES)))
    after = replan.next_step(v, [], replan.Attempted(0, NODES, SPARES, 3, allocation=(*NODES, *SPARES)))
    assert isinstance(after, replan.Relaunch)
    assert (after.nodes, after.dropped) == (before.nodes, before.dropped) == (NODES, ())


def test_a_slow_link_with_neither_end_slow_is_said_and_no_node_dropped() -> None:
    found = hangcheck.finding(_report("node3-node4-link-500mbit"), NODES, SPARES)
    assert found.node is None and found.said in ("no node below par; slow link(s) with neither end slow: node3-node4",
                                                 "no node below par; slow link(s) with neither end slow: node4-node3")


def test_a_spare_below_par_is_kept_out_and_the_attempts_node_still_named() -> None:
    found = hangcheck.finding(_report("node3-link-100mbit"), ("node1", "node2", "node4", "node5"), ("node3",))
    assert found.node is None and found.spares == ("node3",) and "spare(s) below par, not taken: node3" in found.said
    run = _run()
    run.nodes, run.unused = ("node1", "node2", "node4", "node5"), ("node3",)
    v = hangcheck.after_hang(STALL, run, lambda nodes: _report("node3-link-100mbit"), lambda line: None)
    assert v.node is None and run.unused == ()


def test_several_nodes_below_par_name_none() -> None:
    changed = _report("healthy", edit=lambda m, lines: _rewrite(   # changed: two nodes' checksums
        lines, m, lambda ev: ev["ev"] == "gemm" and ev["host"] in ("node1", "node2"),
        lambda ev: {**ev, "checksum": "1"}))
    found = hangcheck.finding(changed, NODES, SPARES)
    assert found.node is None and found.said.startswith("2 nodes below par (node1, node2): no one node to drop")
    # with each one's reason, as the check gave it, so the figures behind the verdict reach the job's log
    assert ("(node1: wrong-result; perf.gemm: matmul checksum differs from the allocation's majority (task 0); "
            "node2: wrong-result; perf.gemm: ") in found.said, found.said


def test_the_checks_own_failure_names_none() -> None:
    marker, err = "@@ck-perf-0", "ModuleNotFoundError: No module named 'torch'"   # as in tests/preflight/test_perf.py
    lines = [f"{r}: {marker} {json.dumps({'ev': ev, 'rank': r, 'host': h, **extra})}"
             for r, h in enumerate(HOSTS) for ev, extra in (("start", {}), ("error", {"error": err}))]
    alike = json.dumps(judge(HOSTS, parse_output(lines, marker, HOSTS), LIMITS).to_dict())
    assert hangcheck.finding(alike, NODES, SPARES) == hangcheck.Finding(None, "no node below par")
    assert hangcheck.finding(None, NODES, SPARES).said == "no report from the check: no node named"
    assert hangcheck.finding("not json {", NODES, SPARES).node is None
    every = json.dumps({"nodes": [{"host": h, "status": "slow"} for h in HOSTS]})
    assert hangcheck.finding(every, NODES, SPARES).said.startswith("every node checked is below par")
    forged = json.dumps({"nodes": [{"host": "node3;rm", "status": "slow"}], "slow_links": [{"nodes": ["a b", "c"]}]})
    assert hangcheck.finding(forged, NODES, SPARES).node is None   # no host of the check's: no result for each


def test_the_check_runs_only_after_a_stall_that_named_no_node() -> None:
    asked: list[tuple[str, ...]] = []
    lines: list[str] = []

    def check(nodes: tuple[str, ...]) -> str:
        asked.append(nodes)
        return _report("node3-link-100mbit")

    named = watch.stalled_verdict(stall.Stall(65.0, 60.0, 12, "train"),
                                  watch.ranks.Behind((2,), ("node3",), "its heartbeat stood still"))
    for v in (named, replan.Verdict("nccl-network", "x"), replan.Verdict("unknown")):
        assert hangcheck.after_hang(v, _run(), check, lines.append) == v
    assert hangcheck.after_hang(STALL, _run(), None, lines.append) == STALL
    assert asked == [] and lines == []
    v = hangcheck.after_hang(STALL, _run(), check, lines.append)
    assert asked == [(*NODES, *SPARES)] and v.node == "node3"
    assert lines[0] == "recovery: no node named for the hang: running the performance check on node[1-5]"
    assert lines[1].startswith("recovery: the performance check after the hang: node3 below par (slow")


def test_the_check_is_preflight_perf_over_srun_and_its_failure_is_no_report(monkeypatch: Any) -> None:
    """subprocess.run stands in for the check's process (the real one runs on the Slurm testbed)."""
    import subprocess

    seen: list[list[str]] = []
    answers: list[Any] = [subprocess.CompletedProcess([], 1, _report("node3-link-100mbit").encode()),
                          subprocess.CompletedProcess([], 2, b"usage"), subprocess.TimeoutExpired("x", 5)]

    def fake_run(argv: list[str], **kw: Any) -> Any:
        seen.append(argv)
        assert kw["timeout"] == 5.0 and kw["stdin"] == subprocess.DEVNULL
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(subprocess, "run", fake_run)
    lines: list[str] = []
    check = hangcheck.perf_check("/s/site.yaml", "multi-node", 5.0, lines.append)
    assert check(NODES) == _report("node3-link-100mbit")
    assert seen[0][1:] == ["-m", "clusterkit", "preflight", "--perf", "--site", "/s/site.yaml", "--stage", "multi-node",
                           "--transport=srun", "--nodelist", "node[1-4]", "--json"]
    assert check(NODES) is None and lines[-1] == "recovery: the performance check gave no report (exit 2)"
    assert check(NODES) is None and lines[-1].startswith("recovery: the performance check did not finish")
