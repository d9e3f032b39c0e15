"""The waiting line: Slurm's reason is text from outside (printable, one line, bounded); in a
pipe a line per change of state, reason or place in the queue; on a terminal a live line.  The
queue's answer comes from a stand-in here (squeue is parsed on real captures in
tests/scheduler/test_queue.py)."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

from clusterkit.cli.waiting import LIVE_REASON_MAX, QUEUE_EVERY_S, Watcher, describe
from clusterkit.scheduler.base import JobStatus
from clusterkit.scheduler.slurm.queue import Spot


def test_a_hostile_pending_reason_is_shown_printable_and_bounded() -> None:
    rec: Any = SimpleNamespace(job_id="42")
    st = JobStatus(state="PENDING", reason="ReqNodeNotAvail,\x1b[2J\x1b]0;owned\x07 UnavailableNodes:" + "n," * 900)
    line = describe(rec, st, LIVE_REASON_MAX)
    assert line.startswith("job 42 PENDING, reason: ReqNodeNotAvail,")
    assert line.isprintable() and "\x1b" not in line and "owned\x07" not in line
    assert len(line) <= len("job 42 PENDING, reason: ") + LIVE_REASON_MAX and line.endswith("...")
    plain = describe(rec, JobStatus(state="PENDING", reason="Priority"), LIVE_REASON_MAX)
    assert plain == "job 42 PENDING, reason: Priority"


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _spot(position: int, waiting: int, start: str | None = None) -> Spot:
    return Spot(position, waiting, ("debug",), start)


def _watcher(places: list[Spot | None], **kw: Any) -> tuple[Watcher, list[str], _Clock, list[int]]:
    asked: list[int] = []

    def place() -> Spot | None:
        asked.append(1)
        return places.pop(0) if places else None

    said: list[str] = []
    clock = _Clock()
    job: Any = SimpleNamespace(record=SimpleNamespace(job_id="42"))
    return Watcher(job, place, say=said.append, clock=clock, **kw), said, clock, asked


def test_in_a_pipe_a_line_only_when_the_state_reason_or_place_changes() -> None:
    watch, said, clock, asked = _watcher([_spot(3, 4), _spot(3, 4), _spot(2, 3, "2026-12-06T04:10:00"), None])
    pending = JobStatus(state="PENDING", reason="Priority")
    watch(pending)
    for _ in range(10):                   # polls within QUEUE_EVERY_S: the queue is not asked again
        clock.now += 1
        watch(pending)
    assert said == ["clusterkit: job 42 PENDING, reason: Priority, 3rd of 4 pending in debug"] and len(asked) == 1
    clock.now += QUEUE_EVERY_S            # asked again: the same place, no line
    watch(pending)
    assert len(said) == 1 and len(asked) == 2
    clock.now += QUEUE_EVERY_S
    watch(pending)
    assert said[1] == ("clusterkit: job 42 PENDING, reason: Priority, 2nd of 3 pending in debug, "
                       "Slurm's start estimate 2026-12-06T04:10:00 (after 0:40)")
    watch(JobStatus(state="PENDING", reason="Resources"))   # a new reason: the queue is asked at once
    assert len(asked) == 4 and said[2] == "clusterkit: job 42 PENDING, reason: Resources (after 0:40)"
    clock.now += 5
    watch(JobStatus(state="RUNNING", nodes="node[1-2]"))
    watch(JobStatus(state="RUNNING", nodes="node[1-2]"))
    assert said[3:] == ["clusterkit: job 42 RUNNING (after 0:45)"] and len(asked) == 4


def test_a_local_job_is_never_looked_up_in_a_queue() -> None:
    said: list[str] = []
    job: Any = SimpleNamespace(record=SimpleNamespace(job_id="7"))
    watch = Watcher(job, None, say=said.append, clock=_Clock())
    watch(JobStatus(state="RUNNING"))
    assert said == ["clusterkit: job 7 RUNNING"]


def test_on_a_terminal_the_pending_line_is_live_and_each_state_a_line() -> None:
    from rich.console import Console

    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=200, color_system=None)
    watch, said, clock, _ = _watcher([_spot(2, 5), _spot(1, 5)], live=console)
    pending = JobStatus(state="PENDING", reason="Priority")
    watch(pending)
    live = watch._live
    assert live is not None and live.is_started
    assert str(watch.__rich__()) == ("clusterkit: job 42 PENDING, reason: Priority, 2nd of 5 pending in debug, "
                                     "waiting 0:00")
    clock.now += QUEUE_EVERY_S + 50
    watch(pending)                        # a new place: the live line, no line of its own
    assert str(watch.__rich__()).endswith("1st of 5 pending in debug, waiting 1:05")
    watch(JobStatus(state="RUNNING"))
    assert watch._live is None and not live.is_started and said == []
    text = screen.getvalue()
    assert "clusterkit: job 42 PENDING, reason: Priority\n" in text
    assert "clusterkit: job 42 RUNNING (after 1:05)" in text
    assert text.count("clusterkit: job 42 PENDING, reason: Priority\n") == 1
