"""Job status across schedulers: refresh many records at once, wait for an end, cache it.

:func:`refresh` asks each scheduler (:func:`clusterkit.scheduler.get`) about its own records
in one batch, so status for many jobs costs a constant number of scheduler calls.  A job no
scheduler knows any more, and that left no result file, is ``LOST``: a terminal state, so
``--wait`` and status never hang on a job that died without a trace.  While slurmctld does
not answer, Slurm jobs are ``UNKNOWN`` (or their last known state) and marked ``stale``;
nothing stale is cached.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from clusterkit.scheduler.arrays import is_task
from clusterkit.scheduler.base import JobStatus
from clusterkit.scheduler.results import read_result_file
from clusterkit.scheduler.slurm.tables import SlurmQuery
from clusterkit.vocab import SCHEDULER_KINDS, JobState

if TYPE_CHECKING:
    from clusterkit.scheduler.records import JobRecord, RecordStore


def refresh(records: Sequence[JobRecord], query: SlurmQuery | None = None) -> list[tuple[JobRecord, JobStatus]]:
    """Current status of each record; one batch of scheduler calls per kind of scheduler.

    ``query.unreachable`` is set when slurmctld did not answer (the Slurm jobs are then stale).
    """
    from clusterkit.scheduler import get

    query = query or SlurmQuery()
    query.unreachable = None
    found: dict[int, JobStatus] = {}
    for kind in SCHEDULER_KINDS:
        picked = [i for i, r in enumerate(records) if r.scheduler == kind]
        if picked:
            statuses = get(kind, query).status([records[i] for i in picked])
            found.update(zip(picked, statuses, strict=True))
    return [(rec, found[i]) for i, rec in enumerate(records)]


def may_still_run(st: JobStatus) -> bool:
    """Whether a job could still be running: anything but an end Slurm itself reported now.

    ``cancel`` asks this, so an outage (state UNKNOWN, or a stale cached end) still reaches
    ``scancel``, which is harmless for a job that has in fact ended.
    """
    return st.stale or not st.terminal


def shown_stale(st: JobStatus) -> bool:
    """Whether status marks the state ``(stale)``: only a state that may still change.  A
    terminal state stays terminal (a job recorded FAILED is not stale because slurmctld is
    down); ``cancel`` still treats it as unconfirmed (:func:`may_still_run`)."""
    return st.stale and not st.terminal


def remember(store: RecordStore, rec: JobRecord, st: JobStatus) -> JobRecord:
    """Cache a terminal status in the record (so later status calls cost nothing).

    A stale status is never cached: it is what we knew, not what Slurm says.
    """
    if not st.terminal or st.stale or rec.state == st.state or is_task(rec):
        return rec   # (an array task's view is not a record of its own: its array's is)
    return store.update(rec, state=st.state, exit_code=st.exit_code, signal=st.signal, reason=st.reason)


def wait(rec: JobRecord, *, poll_s: float = 0.5, max_poll_s: float = 5.0, outage_max_s: float = 20.0,
         confirm_s: float = 1.0, query: SlurmQuery | None = None,
         on_change: Callable[[JobStatus], None] | None = None,
         on_poll: Callable[[JobStatus], None] | None = None) -> JobStatus:
    """Poll until the job reaches a terminal state (LOST included, so this always ends).

    An end without a result file is confirmed by a second look ``confirm_s`` later: while
    slurmctld requeues a job it can show a terminal state for a moment.  While slurmctld does
    not answer, the job is UNKNOWN (not ended) and polling backs off to ``outage_max_s``, so
    an outage of any length is waited out without adding to the controller's load.
    """
    last: JobState | None = None
    heard: tuple[JobState, str | None] | None = None
    delay = poll_s
    while True:
        (_, st), = refresh([rec], query)
        if st.terminal and not st.stale and read_result_file(rec.result_file) is None and rec.scheduler == "slurm":
            time.sleep(confirm_s)
            (_, st), = refresh([rec], query)
        if heard != heard_key(st) and on_change is not None:
            on_change(st)
        if on_poll is not None:
            on_poll(st)
        heard = heard_key(st)
        if st.terminal:
            return st
        delay = _next_delay(st, changed=st.state != last, delay=delay, poll_s=poll_s,
                            cap=outage_max_s if st.stale else max_poll_s)
        last = st.state
        time.sleep(delay)


def heard_key(st: JobStatus) -> tuple[JobState, str | None]:
    """What a waiting user hears again when it changes: the state, and while the job is
    pending, Slurm's reason (squeue's ``%r``: Priority, Resources, ReqNodeNotAvail, ...)."""
    return st.state, st.reason if st.state is JobState.PENDING else None


def wait_started(rec: JobRecord, *, poll_s: float = 0.5, max_poll_s: float = 5.0, outage_max_s: float = 20.0,
                 query: SlurmQuery | None = None, on_change: Callable[[JobStatus], None] | None = None,
                 on_poll: Callable[[JobStatus], None] | None = None) -> JobStatus:
    """Poll until the job left the queue (any state but PENDING, or UNKNOWN while Slurm does not
    answer); ``on_change`` hears each new state and each new pending reason, ``on_poll`` every
    status polled."""
    heard: tuple[JobState, str | None] | None = None
    delay = poll_s
    while True:
        (_, st), = refresh([rec], query)
        changed = heard != heard_key(st)
        if changed and on_change is not None:
            on_change(st)
        if on_poll is not None:
            on_poll(st)
        heard = heard_key(st)
        if st.terminal or st.state not in (JobState.PENDING, JobState.UNKNOWN):
            return st
        delay = _next_delay(st, changed=changed, delay=delay, poll_s=poll_s,
                            cap=outage_max_s if st.stale else max_poll_s)
        time.sleep(delay)


def _next_delay(st: JobStatus, *, changed: bool, delay: float, poll_s: float, cap: float) -> float:
    if st.stale:  # an overloaded controller is the usual cause: ask it less and less often
        return min(cap, delay * 2)
    return poll_s if changed else min(cap, delay * 1.5)


def exit_status_of(st: JobStatus) -> int:
    """The exit status a shell would see for this job (128+signal for a killed one)."""
    if st.exit_code is not None:
        return st.exit_code
    if st.signal is not None:
        return 128 + st.signal
    return 0 if st.state == JobState.COMPLETED else 1


def ended_at(rec: JobRecord) -> str | None:
    """When the job script wrote its result (the result file's time, UTC ISO), or None."""
    from datetime import datetime, timezone

    from clusterkit.safefile import is_regular_file

    path = rec.result_file
    try:
        if not is_regular_file(path):
            return None
        return datetime.fromtimestamp(path.lstat().st_mtime, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except OSError:
        return None


def summarize(rec: JobRecord, st: JobStatus) -> Mapping[str, Any]:
    """The JSON shape of one job's status (what ``status --json`` prints)."""
    return {
        "job": rec.key, "job_id": rec.job_id, "site": rec.site, "stage": rec.stage,
        "launcher": rec.launcher, "name": rec.job_name, "nodes": rec.nnodes, "world_size": rec.world_size,
        "state": st.state.value, "exit_code": st.exit_code, "signal": st.signal, "reason": st.reason,
        "node_list": st.nodes, "restarts": st.restarts, "source": st.source, "stale": shown_stale(st),
        "submitted_at": rec.submitted_at, "ended_at": ended_at(rec) if st.terminal else None,
        "run_dir": rec.run_dir, "diagnosis": rec.diagnosis, "code": code_of(rec),
        **({"tasks": st.reason} if st.tasks else {}),   # a job array: its tasks by state
    }


_CODE_KEYS = ("tree", "commit", "dirty", "diff_sha256", "source", "workdir", "files", "bytes", "git", "store")


def code_of(rec: JobRecord) -> dict[str, Any] | None:
    """The code snapshot the job runs in, as its record's plan has it (None: it runs the live tree)."""
    code = rec.plan.get("code")
    return {k: code.get(k) for k in _CODE_KEYS} if isinstance(code, dict) else None
