"""The waiting line's Slurm reason is text from outside: printable, one line, bounded."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from clusterkit.cli.waiting import LIVE_REASON_MAX, describe
from clusterkit.scheduler.base import JobStatus


def test_a_hostile_pending_reason_is_shown_printable_and_bounded() -> None:
    rec: Any = SimpleNamespace(job_id="42")
    st = JobStatus(state="PENDING", reason="ReqNodeNotAvail,\x1b[2J\x1b]0;owned\x07 UnavailableNodes:" + "n," * 900)
    line = describe(rec, st, LIVE_REASON_MAX)
    assert line.startswith("job 42 PENDING, reason: ReqNodeNotAvail,")
    assert line.isprintable() and "\x1b" not in line and "owned\x07" not in line
    assert len(line) <= len("job 42 PENDING, reason: ") + LIVE_REASON_MAX and line.endswith("...")
    plain = describe(rec, JobStatus(state="PENDING", reason="Priority"), LIVE_REASON_MAX)
    assert plain == "job 42 PENDING, reason: Priority"
