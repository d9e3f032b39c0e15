"""The life of a submitted job, one function per CLI command: submit a rendered run (and record
it), look at one job or the recent ones, follow one to its end, list its logs, cancel it.

Nothing here prints: each function returns what happened, problems that are not failures
(a record that could not be saved or updated, a controller that did not answer) included, and
the CLI says them.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterkit.errors import RecordError
from clusterkit.scheduler import get
from clusterkit.scheduler.arrays import is_task
from clusterkit.scheduler.logs import LogTail, tails
from clusterkit.scheduler.records import JobRecord, now_utc
from clusterkit.scheduler.slurm.tables import SlurmQuery
from clusterkit.scheduler.status import may_still_run, refresh, remember, summarize, wait

if TYPE_CHECKING:
    from clusterkit.rundir import RenderedRun
    from clusterkit.scheduler.base import CancelOutcome, JobStatus, OnGrace
    from clusterkit.scheduler.records import RecordStore
    from clusterkit.vocab import JobState

TAIL_LINES = 20


# --------------------------------------------------------------------------- submit


@dataclass(frozen=True)
class Submission:
    record: JobRecord
    # the job is submitted, but its record could not be saved (status, logs, cancel do not know it)
    unsaved: RecordError | None = None
    # a Slurm job without --run-name whose run tag could not be set (docs/jobs.md, What a run cost)
    untagged: str | None = None


def new_record(run: RenderedRun, job_id: str) -> JobRecord:
    """The record of ``run``, just submitted as ``job_id``."""
    p = run.plan
    return JobRecord(
        job_id=job_id, scheduler=p.scheduler, site=p.site, site_source=p.site_file,
        stage=p.stage, launcher=p.launcher, job_name=p.job_name, nnodes=p.nnodes, world_size=p.world_size,
        command=list(p.command), run_dir=str(run.run_dir), script=str(run.script), submitted_at=now_utc(),
        host=socket.gethostname(), plan=p.to_dict(),
    )


def submit_run(run: RenderedRun, store: RecordStore) -> Submission:
    """Submit the rendered run to its site's scheduler and save its record.

    Check ``store.check_writable()`` before rendering: once the scheduler took the job, a
    record that cannot be saved is reported in the result, never raised.
    """
    job_id = get(run.plan.scheduler).submit(run)
    untagged = None
    if run.plan.scheduler == "slurm" and run.plan.run_name is None:
        from clusterkit.job.longrun import default_run_name
        from clusterkit.job.runtag import tag
        from clusterkit.scheduler.slurm import tag_job

        untagged = tag_job(job_id, tag(default_run_name(run.plan.job_name, job_id)))
    rec = new_record(run, job_id)
    try:
        store.save(rec)
    except RecordError as err:
        return Submission(rec, err, untagged)
    return Submission(rec, untagged=untagged)


# --------------------------------------------------------------------------- status


@dataclass
class Look:
    """One job's status now, with what could not be done on the way."""

    record: JobRecord
    status: JobStatus
    tails: list[LogTail] = field(default_factory=list)  # log tails, once the job ended
    cache_failures: list[str] = field(default_factory=list)  # its final state could not be cached
    unreachable: str | None = None  # slurmctld did not answer: the status is stale


@dataclass
class Overview:
    """The recent jobs' statuses (``summarize`` rows, oldest first)."""

    rows: list[Mapping[str, Any]]
    unreadable: list[RecordError]
    cache_failures: list[str] = field(default_factory=list)
    unreachable: str | None = None


def _remember(store: RecordStore, rec: JobRecord, st: JobStatus, failures: list[str]) -> JobRecord:
    """Cache a final state in the record; a records directory that refuses is noted, not fatal."""
    try:
        return remember(store, rec, st)
    except RecordError as err:
        failures.append(str(err))
        return rec


def look(store: RecordStore, ref: str, *, tail_lines: int = TAIL_LINES, query: SlurmQuery | None = None) -> Look:
    """The job named ``ref`` (``JOB_ID`` or ``SITE:JOB_ID``): its status, cached if final."""
    query = query or SlurmQuery()
    rec = store.find(ref)
    (_, st), = refresh([rec], query)
    failures: list[str] = []
    rec = _remember(store, rec, st, failures)
    found = tails(get(rec.scheduler).logs(rec), tail_lines) if st.terminal else []
    return Look(rec, st, found, failures, query.unreachable)


def overview(store: RecordStore, limit: int, *, query: SlurmQuery | None = None) -> Overview:
    """The ``limit`` most recent jobs, and older ones that have not ended yet, refreshed in one
    batch per scheduler.  Only those records are read."""
    query = query or SlurmQuery()
    recs, bad = store.recent(limit)
    failures: list[str] = []
    rows = []
    for rec, st in refresh(recs, query):
        _remember(store, rec, st, failures)
        rows.append(summarize(rec, st))
    return Overview(rows, bad, failures, query.unreachable)


def follow_to_end(store: RecordStore, rec: JobRecord, *, tail_lines: int = TAIL_LINES,
                  on_change: Callable[[JobStatus], None] | None = None,
                  on_poll: Callable[[JobStatus], None] | None = None) -> Look:
    """Wait for the job's end (``on_change`` hears each new state, ``on_poll`` every status
    polled); its final status and log tails."""
    st = wait(rec, on_change=on_change, on_poll=on_poll)
    failures: list[str] = []
    rec = _remember(store, rec, st, failures)
    return Look(rec, st, tails(get(rec.scheduler).logs(rec), tail_lines), failures)


# --------------------------------------------------------------------------- logs


def job_logs(store: RecordStore, ref: str) -> tuple[JobRecord, list[Path]]:
    """The job named ``ref`` and its log files (the batch log first)."""
    rec = store.find(ref)
    return rec, get(rec.scheduler).logs(rec)


def log_files(rec: JobRecord) -> list[Path]:
    return get(rec.scheduler).logs(rec)


def has_ended(rec: JobRecord) -> bool:
    (_, st), = refresh([rec])
    return st.terminal


# --------------------------------------------------------------------------- cancel


@dataclass(frozen=True)
class Cancellation:
    record: JobRecord
    state_before: JobState
    cancelled: bool = False
    grace_waited_s: float | None = None
    # the job is cancelled, but its record could not say so
    unrecorded: RecordError | None = None


def cancel_job(store: RecordStore, ref: str, *, now: bool, on_grace: OnGrace | None = None) -> Cancellation:
    """Cancel the job named ``ref`` unless its scheduler reports it ended (an unanswered
    controller is not an end: scancel is tried, harmless for a job that has in fact ended)."""
    rec = store.find(ref)
    (_, st), = refresh([rec])
    if not may_still_run(st):
        return Cancellation(rec, st.state)
    done: CancelOutcome = get(rec.scheduler).cancel(rec, st, now=now, on_grace=on_grace)
    if is_task(rec):   # one task of an array: the array's record stays as it is
        return Cancellation(rec, st.state, done.cancelled, done.grace_waited_s)
    try:
        rec = store.update(rec, cancel_requested=True)
    except RecordError as err:
        return Cancellation(rec, st.state, done.cancelled, done.grace_waited_s, err)
    return Cancellation(rec, st.state, done.cancelled, done.grace_waited_s)
