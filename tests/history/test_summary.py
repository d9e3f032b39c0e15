"""Counting a node history per node: the window, the threshold, the allow list, the drain line."""

from __future__ import annotations

import shlex
from datetime import datetime, timezone

from clusterkit.config.history_keys import NodeHistoryKeys
from clusterkit.history import sources
from clusterkit.history.store import Event
from clusterkit.history.summary import kept_out, summarize
from clusterkit.preflight.choose import NodeVerdict
from clusterkit.scheduler.records import JobRecord

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def ev(node: str, day: int, month: int = 11, *, hardware: bool = True, what: str = "gpu-hardware",
       job: str = "1") -> Event:
    return Event(node, f"2026-{month:02d}-{day:02d}T00:00:00Z", "doctor", what, hardware, job)


def test_only_hardware_failures_within_the_window_count() -> None:
    events = [ev("node1", 1, 10, job="1"), ev("node1", 20, job="2"), ev("node1", 25, job="3"),   # one too old
              ev("node2", 20, hardware=False, what="storage.free"), ev("node2", 21, hardware=False, what="x"),
              ev("node2", 22, hardware=False, what="x"),
              ev("node3", 20, job="4"), ev("node3", 21, job="5"), ev("node3", 22, job="6")]
    got = {s.node: s for s in summarize(events, NodeHistoryKeys(window_days=30), NOW)}
    assert (got["node1"].failures, got["node1"].recent_hardware, got["node1"].kept_out) == (3, 2, False)
    assert (got["node2"].failures, got["node2"].recent_hardware, got["node2"].kept_out) == (3, 0, False)
    assert (got["node3"].recent_hardware, got["node3"].kept_out) == (3, True)
    assert got["node3"].jobs == ("6", "5", "4") and got["node3"].last_at == "2026-11-22T00:00:00Z"
    assert [s.node for s in kept_out(list(got.values()))] == ["node3"]
    assert [s.node for s in summarize(events, NodeHistoryKeys(window_days=90), NOW) if s.kept_out] == ["node1",
                                                                                                        "node3"]


def test_threshold_zero_and_the_allow_list_keep_nobody_out() -> None:
    events = [ev("node3", d, job=str(d)) for d in (20, 21, 22)]
    assert not kept_out(summarize(events, NodeHistoryKeys(exclude_after=0), NOW))
    [s] = summarize(events, NodeHistoryKeys(allow="node[2-3]"), NOW)
    assert (s.kept_out, s.allowed) == (False, True)
    [s] = summarize(events, NodeHistoryKeys(exclude_after=1), NOW)
    assert s.kept_out


def test_the_drain_command_is_one_quoted_shell_line() -> None:
    [s] = summarize([ev("node3", d, job=str(d)) for d in (20, 21, 22)], NodeHistoryKeys(), NOW)
    cmd = s.drain_command(30)
    words = shlex.split(cmd)
    assert words[:4] == ["scontrol", "update", "NodeName=node3", "State=DRAIN"] and len(words) == 5
    assert words[4] == "Reason=clusterkit: 3 hardware failure(s) in 30 day(s): gpu-hardware x3 (jobs 22, 21, 20)"


def _rec(job: str = "55") -> JobRecord:
    return JobRecord(job_id=job, scheduler="slurm", site="s", site_source="s.yaml", stage="multi-node",
                     launcher="torchrun", job_name="j", nnodes=2, world_size=2, command=["x"], run_dir="/nonexistent",
                     script="/nonexistent/job.sbatch", submitted_at="2026-11-20T00:00:00.000000Z", host="h", plan={})


def test_an_in_job_drop_is_read_as_its_check() -> None:
    got = sources.from_dropped(_rec(), [NodeVerdict("node2", "failed", "gpu.count: 7 GPUs, expected 8"),
                                        NodeVerdict("node4", "slow", "busbw 3 GB/s < 0.5 x median"),
                                        NodeVerdict("node5", "unreachable", "timed out"),
                                        NodeVerdict("node6", "failed", "storage.free: /lustre 1 GB free")], "T")
    assert [(e.node, e.what, e.hardware, e.job) for e in got] == [
        ("node2", "gpu.count", True, "55"), ("node4", "slow", True, "55"), ("node5", "unreachable", False, "55"),
        ("node6", "storage.free", False, "55")]


def test_a_doctor_verdict_counts_only_when_it_names_a_node() -> None:
    rec = _rec()
    assert sources.from_diagnosis(rec, {"verdict": {"category": "user-code", "node": None}}) == []
    assert sources.from_diagnosis(rec, {"verdict": {"category": "ok", "node": "node1"}}) == []
    assert sources.from_diagnosis(rec, {"tasks": []}) == []
    [e] = sources.from_diagnosis(rec, {"verdict": {"category": "gpu-hardware", "node": "node3", "summary": "Xid 79"}})
    assert (e.node, e.source, e.what, e.hardware, e.job, e.detail) == ("node3", "doctor", "gpu-hardware", True, "55",
                                                                        "Xid 79")
    [e] = sources.from_diagnosis(rec, {"verdict": {"category": "host-oom", "node": "node1"}})
    assert not e.hardware
