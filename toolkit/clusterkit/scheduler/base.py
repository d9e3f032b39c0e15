"""What every scheduler offers (:class:`Scheduler`), and the status it reports (:class:`JobStatus`).

A scheduler is one of :data:`clusterkit.vocab.SCHEDULER_KINDS`: ``slurm`` (:mod:`.slurm`) or
``local`` (:mod:`.local`); :func:`clusterkit.scheduler.get` returns the one for a kind.  Both
take a rendered run and return a job id, report many jobs' states at once, cancel one job and
name its log files.  Everything above them (records, ``status``, ``--wait``, ``cancel``) goes
through this interface, never through a kind's own functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from clusterkit import jobfiles
from clusterkit.tooltext import printable, shorten
from clusterkit.vocab import JobState, SchedulerKind

#: Characters of a job's reason (Slurm's free text) kept: Slurm's own reasons are a line.
REASON_MAX = 500

if TYPE_CHECKING:
    from clusterkit.rundir import RenderedRun
    from clusterkit.scheduler.records import JobRecord


@dataclass(frozen=True)
class JobStatus:
    """One job's state as the scheduler (or the result file) reports it."""

    state: JobState
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    nodes: str | None = None
    restarts: int | None = None
    source: str = "none"
    raw: str | None = None
    # Slurm did not answer: this is the last state known here, not what Slurm says now
    stale: bool = False
    # a job array's tasks (ARRAYJOB_TASK, status), in index order; empty for any other job
    tasks: tuple[tuple[str, JobStatus], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.state, JobState):  # Slurm's text (or a test's string): its state
            object.__setattr__(self, "state", JobState.parse(self.state))
        for name in ("reason", "nodes"):   # Slurm's free text (or a record's): one bounded, printable line
            text = getattr(self, name)
            if isinstance(text, str) and (len(text) > REASON_MAX or not text.isprintable()):
                cut = printable(text[: REASON_MAX * 4])
                kept = cut if len(cut) <= REASON_MAX else shorten(cut, REASON_MAX, "")
                object.__setattr__(self, name, kept if kept == cut else
                                   f"{kept}... [{max(0, len(text) - len(kept))} more chars]")

    @property
    def terminal(self) -> bool:
        return self.state.is_terminal

    def merged(self, other: JobStatus) -> JobStatus:
        """Fill this status' gaps from ``other`` (this one wins where both know)."""
        return JobStatus(
            state=self.state,
            exit_code=self.exit_code if self.exit_code is not None else other.exit_code,
            signal=self.signal if self.signal is not None else other.signal,
            reason=self.reason or other.reason,
            nodes=self.nodes or other.nodes,
            restarts=self.restarts if self.restarts is not None else other.restarts,
            source=self.source, raw=self.raw,
        )


def status_from_result(code: int, rec: JobRecord) -> JobStatus:
    """The end a result file tells (``<run dir>/<job id>.result``: the script's exit status)."""
    if rec.cancel_requested and code != 0:
        return JobStatus(state=JobState.CANCELLED, exit_code=code, source="result-file")
    return JobStatus(state=JobState.COMPLETED if code == 0 else JobState.FAILED, exit_code=code,
                     source="result-file")


def with_script_reason(rec: JobRecord, st: JobStatus, job_id: str | None = None) -> JobStatus:
    """The job's own reason for its end (``<job id>.reason``, the supervisor's: restart budget
    spent, a time limit on the local site, ...) beats the scheduler's generic one
    (``NonZeroExitCode``).  Its first line, bounded and printable.  ``job_id``: an array task's
    own id, where ``rec`` is its array's record."""
    if not st.terminal:
        return st
    try:
        with open(jobfiles.REASON.path(rec.run_dir, job_id or rec.job_id), "rb") as f:
            text = f.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return st
    reason = printable(text.strip().splitlines()[0])[:300] if text.strip() else ""
    return replace(st, reason=reason) if reason else st


def preempted_then_ended(st: JobStatus, code: int | None, rec: JobRecord) -> JobStatus | None:
    """A job (or array task) Slurm calls PREEMPTED that its own script ended for good: the
    script's end (its result file), with Slurm's restarts and nodes.  Slurm 24.05+ records a job
    that was preempted once, requeued and later ended by its script as PREEMPTED
    (job-endgame.sh.j2); None when that is not the case."""
    if st.state != JobState.PREEMPTED or code is None:
        return None
    return replace(status_from_result(code, rec), restarts=st.restarts, nodes=st.nodes, raw=st.raw)


def settle(rec: JobRecord, st: JobStatus | None, code: int | None, *, own_record: bool = True,
           siblings_listed: bool = False) -> JobStatus:
    """The one status rule for a Slurm job and an array task: what Slurm says of it (``st``; None
    where Slurm no longer lists it), the job script's own exit status (``code``, its result file)
    and the record.

    Forgotten by Slurm: the record's final state where the record is this job's own
    (``own_record``; an array's record is not its tasks'), else the result file, else pending where
    Slurm still lists other tasks of its array (``siblings_listed``: a task it does not list has
    not started), else the record's final state without its reason, else LOST.  Listed: a
    preempted job its own script ended for good is that end; a live one has no exit status yet;
    an ended one without an exit code, or with one that contradicts its own FAILED (an accounting
    record not yet complete), takes the script's."""
    if st is None:
        if own_record and rec.state is not None and rec.state.is_terminal:
            return cached_status(rec)
        if code is not None:
            return status_from_result(code, rec)
        if siblings_listed:
            return JobStatus(state=JobState.PENDING, source="squeue")
        if rec.state is not None and rec.state.is_terminal:
            return replace(cached_status(rec), reason=None)
        return JobStatus(state=JobState.LOST, reason="unknown to Slurm and no result file", source="none")
    ended = preempted_then_ended(st, code, rec)
    if ended is not None:
        return ended
    if not st.terminal:
        return replace(st, exit_code=None, signal=None)
    if st.signal is None and code is not None and (
            st.exit_code is None or (st.state == JobState.FAILED and st.exit_code == 0 and code != 0)):
        return replace(st, exit_code=code)
    return st


def cached_status(rec: JobRecord) -> JobStatus:
    """The final state cached in the record (``UNKNOWN`` when none is)."""
    return JobStatus(state=rec.state or JobState.UNKNOWN, exit_code=rec.exit_code, signal=rec.signal,
                     reason=rec.reason, source="record")


@dataclass(frozen=True)
class CancelOutcome:
    cancelled: bool
    # seconds the ranks had to save between SIGTERM and the cancel (None: no SIGTERM first)
    grace_waited_s: float | None = None


# told the grace time before a graceful cancel starts waiting (so a CLI can say so)
OnGrace = Callable[[float], None]


@dataclass(frozen=True)
class JobDetails:
    """A job's steps (``step``, ``state``, ``exit_code``, ``nodes``) and those of its nodes the
    scheduler holds down or drained, with why; empty where the scheduler keeps no such record."""

    steps: list[dict[str, str]]
    down_nodes: list[tuple[str, str]]


class Scheduler(Protocol):
    """One kind of scheduler.  Add a kind: a module with a class like this, a name in
    :data:`clusterkit.vocab.SCHEDULER_KINDS`, and a branch in :func:`clusterkit.scheduler.get`."""

    kind: SchedulerKind

    def submit(self, run: RenderedRun) -> str:
        """Hand the rendered ``job.sbatch`` over; return the job id (SubmitError if refused)."""
        ...

    def status(self, records: Sequence[JobRecord]) -> list[JobStatus]:
        """The status of each record (all of this kind), in order, in a few scheduler calls."""
        ...

    def cancel(self, rec: JobRecord, st: JobStatus, *, now: bool, on_grace: OnGrace | None = None) -> CancelOutcome:
        """Cancel a job that may still run (``st``: its status now); ``now``: no grace time."""
        ...

    def logs(self, rec: JobRecord) -> list[Path]:
        """The job's log files, the batch log first."""
        ...

    def details(self, rec: JobRecord, st: JobStatus) -> JobDetails:
        """What ``doctor`` shows beyond the job's state (``st``): its steps, its nodes held down."""
        ...
