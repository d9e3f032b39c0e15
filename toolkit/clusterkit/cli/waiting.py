"""What a job says while ``submit --wait``/``--follow`` (and ``status``) look at it: its state,
and while it is pending, Slurm's reason (squeue's ``%r``), its place in the queue and Slurm's
start estimate (:mod:`clusterkit.scheduler.slurm.queue`), with the time waited.

In a pipe (or a log file) a line each time one of them changes, never once per poll.  On a
terminal each new state or reason is a line as well, and while the job is pending one live line
below them (rich) shows its place and the time waited, updated in place.  The queue is asked at
most every :data:`QUEUE_EVERY_S` seconds (it lists every pending job of the cluster), and on
each new state or reason.

Slurm's reason is text from outside: shown printable and bounded (:data:`LIVE_REASON_MAX`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from clusterkit.scheduler import traits
from clusterkit.tooltext import printable

if TYPE_CHECKING:
    from clusterkit.api import Job
    from clusterkit.scheduler.base import JobStatus
    from clusterkit.scheduler.records import JobRecord
    from clusterkit.scheduler.slurm.queue import Spot

#: characters of Slurm's pending reason shown on a live line
LIVE_REASON_MAX = 160
#: seconds between two looks at the queue while a job is pending
QUEUE_EVERY_S = 15.0


def describe(rec: JobRecord, st: JobStatus, reason_max: int | None = None) -> str:
    """``job 123 PENDING, reason: Resources`` (exit code, signal, restarts where known)."""
    parts = [f"job {rec.job_id} {state_text(st)}"]
    if st.exit_code is not None:
        parts.append(f"exit code {st.exit_code}")
    if st.signal is not None:
        parts.append(f"signal {st.signal}")
    if st.restarts:
        parts.append(f"{st.restarts} restart(s)")
    if st.reason:
        reason = " ".join(printable(st.reason).split())
        if reason_max is not None and len(reason) > reason_max:
            reason = reason[:reason_max - 3] + "..."
        parts.append(f"reason: {reason}")
    return ", ".join(parts)


def state_text(st: JobStatus) -> str:
    from clusterkit.scheduler.status import shown_stale

    return f"{st.state} (stale)" if shown_stale(st) else st.state.value


def _clock(seconds: float) -> str:
    waited = int(seconds)
    return f"{waited // 60}:{waited % 60:02d}"


class Watcher:
    """The ``on_poll`` of a waiting command (see the module docstring).  ``place`` asks the
    queue (None: not a Slurm job); ``live`` (a rich console) makes the pending line live."""

    def __init__(self, job: Job, place: Callable[[], Spot | None] | None, *, live: Any = None,
                 say: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        from clusterkit.cli import output

        self.rec = job.record
        self.place, self.console, self.clock = place, live, clock
        self.say = say or output.info
        self.start = clock()
        self.spot: Spot | None = None
        self.asked_at: float | None = None
        self.heard: tuple[object, ...] | None = None    # the state and reason last said
        self.shown: tuple[object, ...] | None = None    # ... and the place last said (in a pipe)
        self.text = ""
        self._live: Any = None

    def __call__(self, st: JobStatus) -> None:
        from clusterkit.scheduler.status import heard_key
        from clusterkit.vocab import JobState

        now = self.clock()
        pending = st.state is JobState.PENDING
        heard = heard_key(st)
        if not pending:
            self.spot = None
        elif self.place is not None and (heard != self.heard or self.asked_at is None
                                         or now - self.asked_at >= QUEUE_EVERY_S):
            self.spot, self.asked_at = self.place(), now
        self.text = describe(self.rec, st, LIVE_REASON_MAX) + (f", {self.spot.worded()}" if self.spot else "")
        after = f" (after {_clock(now - self.start)})" if now - self.start >= 1 else ""
        shown = (*heard, self.spot)
        if self.console is None:
            if shown != self.shown:
                self.say(f"clusterkit: {self.text}{after}")
        else:
            if heard != self.heard:
                self._print(f"clusterkit: {describe(self.rec, st, LIVE_REASON_MAX)}{after}")
            self._show(pending)
        self.heard, self.shown = heard, shown

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(f"clusterkit: {self.text}, waiting {_clock(self.clock() - self.start)}", no_wrap=True,
                    overflow="ellipsis")

    def _print(self, line: str) -> None:
        from rich.text import Text

        (self._live.console if self._live is not None else self.console).print(Text(line), soft_wrap=True)

    def _show(self, pending: bool) -> None:
        if pending and self._live is None:
            from rich.live import Live

            self._live = Live(self, console=self.console, transient=True, refresh_per_second=2,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        elif pending:
            self._live.refresh()
        elif self._live is not None:
            self.close()

    def close(self) -> None:
        if self._live is not None:
            live, self._live = self._live, None
            live.stop()


@contextmanager
def watching(job: Job, quiet: bool = False) -> Iterator[Watcher | None]:
    """The :class:`Watcher` of a waiting command (None with ``quiet``: ``--json``); its live
    line ends with the block."""
    if quiet:
        yield None
        return
    from clusterkit.cli import output

    console = output.err()
    watch = Watcher(job, job.queue_place if traits(job.record.scheduler).queued else None,
                    live=console if console.is_terminal else None)
    try:
        yield watch
    finally:
        watch.close()
