"""A spare checked again before a relaunch takes it (clusterkit.supervise.recheck): the check's
report read as data, a spare that fails it kept out and the step decided again, the check's own
failure never a spare's fault.  End to end on the Slurm testbed in tests/slurm/test_recovery_requeue.py."""

from __future__ import annotations

import json

from clusterkit.supervise import recheck
from clusterkit.supervise.replan import Attempted, Relaunch, RequeueWithout, Verdict

XID = Verdict("gpu-hardware", "Xid 79", "node2")
GPU_MISSING = {"host": "node4", "status": "failed", "checks": [
    {"check": "gpu.count", "status": "fail", "message": "7 GPUs, expected 8"},
    {"check": "gpu.driver", "status": "pass", "message": "550"}]}


def _report(*nodes: dict) -> str:
    return json.dumps({"version": 1, "nodes": list(nodes)})


def _ok(host: str) -> dict:
    return {"host": host, "status": "ok", "checks": []}


def _facts(unused: tuple[str, ...] = ("node4", "node5")) -> Attempted:
    return Attempted(attempt=0, nodes=("node1", "node2", "node3"), unused=unused, max_relaunches=3, restarts_left=2,
                     allocation=("node1", "node2", "node3", "node4", "node5"))


def test_the_report_names_the_spares_that_failed_and_why() -> None:
    bad = recheck.bad_nodes(_report(GPU_MISSING, _ok("node5")), ("node4", "node5"))
    assert bad == {"node4": "failed; gpu.count: 7 GPUs, expected 8"}
    assert recheck.bad_nodes(_report(_ok("node4"), {"host": "node5", "status": "warn"}), ("node4", "node5")) == {}
    # a node the report leaves out has no result: not fit; one outside the nodes asked about is ignored
    assert recheck.bad_nodes(_report(_ok("node9")), ("node4",)) == {"node4": "no result in the check"}
    unreachable = {"host": "node4", "status": "unreachable", "error": "srun: task never answered"}
    assert recheck.bad_nodes(_report(unreachable), ("node4",)) == {"node4": "unreachable; srun: task never answered"}


def test_what_is_not_a_report_is_the_checks_fault_not_a_nodes() -> None:
    for text in ("", "not json", "[]", json.dumps({"nodes": "node4"}), json.dumps({"version": 1})):
        assert recheck.bad_nodes(text, ("node4",)) is None, text
    # entries that are not a node's are skipped, the rest read
    odd = _report({"host": 7, "status": "ok"}, {"host": "no de", "status": "ok"}, _ok("node4"))
    assert recheck.bad_nodes(odd, ("node4",)) == {}


def test_a_spare_that_fails_its_check_is_kept_out_and_the_next_spare_taken() -> None:
    asked: list[tuple[str, ...]] = []

    def check(nodes: tuple[str, ...]) -> dict[str, str] | None:
        asked.append(nodes)
        return recheck.bad_nodes(_report(GPU_MISSING, _ok("node5")), nodes)

    lines: list[str] = []
    step = recheck.checked(XID, [], _facts(), check, lines.append)
    assert isinstance(step, Relaunch) and step.nodes == ("node1", "node3", "node5"), step
    assert asked == [("node4",), ("node5",)]
    assert [h for h, _ in step.dropped] == ["node2", "node4"]
    assert "spare failed its check: failed; gpu.count: 7 GPUs, expected 8" in step.dropped[1][1]
    assert lines == ["recovery: spare(s) failed their check before the relaunch: "
                     "node4 (failed; gpu.count: 7 GPUs, expected 8)"]


def test_no_good_spare_left_requeues_without_the_node_and_the_spare() -> None:
    step = recheck.checked(XID, [], _facts(unused=("node4",)),
                           lambda nodes: recheck.bad_nodes(_report(GPU_MISSING), nodes), lambda _: None)
    assert isinstance(step, RequeueWithout) and set(step.exclude) == {"node2", "node4"}, step
    assert [h for h, _ in step.dropped] == ["node2", "node4"]


def test_without_a_check_or_when_it_gives_no_report_the_relaunch_goes_on() -> None:
    plain = recheck.checked(XID, [], _facts(), None, lambda _: None)
    assert isinstance(plain, Relaunch) and plain.nodes == ("node1", "node3", "node4")
    unchecked = recheck.checked(XID, [], _facts(), lambda nodes: None, lambda _: None)
    assert unchecked == plain
    # a relaunch on the same nodes takes no new node: nothing to check
    asked: list[tuple[str, ...]] = []
    same = recheck.checked(Verdict("unknown"), [], _facts(), lambda n: asked.append(n) or {}, lambda _: None)
    assert isinstance(same, Relaunch) and same.nodes == ("node1", "node2", "node3") and asked == []
