"""What a job says while ``submit --wait``/``--follow`` (and ``status``) look at it: one line per
state, and while it is pending, Slurm's reason (squeue's ``%r``), again only when it changes.

Slurm's reason is text from outside: shown printable and bounded (:data:`LIVE_REASON_MAX`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from clusterkit.tooltext import printable

if TYPE_CHECKING:
    from clusterkit.api import Job
    from clusterkit.scheduler.base import JobStatus
    from clusterkit.scheduler.records import JobRecord

#: characters of Slurm's pending reason shown on a live line
LIVE_REASON_MAX = 160


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


def heard(job: Job) -> Callable[[JobStatus], None]:
    """The ``on_change`` of a waiting command: a line on stderr per new state or pending reason,
    with the time waited so far."""
    from clusterkit.cli import output

    start = time.monotonic()

    def say(st: JobStatus) -> None:
        waited = int(time.monotonic() - start)
        after = f" (after {waited // 60}:{waited % 60:02d})" if waited else ""
        output.info(f"clusterkit: {describe(job.record, st, LIVE_REASON_MAX)}{after}")

    return say
