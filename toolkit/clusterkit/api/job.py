"""Jobs from Python: find one, follow its state and logs, wait, cancel, diagnose (``docs/api.md``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterkit.errors import ClusterkitError, ExitCode, InputError, NoJobRecord, RecordError
from clusterkit.scheduler import traits
from clusterkit.scheduler.base import JobStatus
from clusterkit.scheduler.records import JobRecord, RecordStore, load_record
from clusterkit.supervise import attempts as supervise_attempts
from clusterkit.vocab import JobState

if TYPE_CHECKING:
    from clusterkit.diagnose import Diagnosis
    from clusterkit.diagnose.doctor import ProgressBar
    from clusterkit.diagnose.logfilter import LogFilter
    from clusterkit.preflight.choose import NodeVerdict
    from clusterkit.scheduler.base import OnGrace
    from clusterkit.scheduler.jobs import Cancellation, Look, Overview
    from clusterkit.scheduler.logs import LogTail
    from clusterkit.scheduler.slurm.queue import Spot

    from .rundir import RunDir

StrPath = str | os.PathLike[str]


def _store(store: RecordStore | None) -> RecordStore:
    return store if store is not None else RecordStore()


# --------------------------------------------------------------------------- site


class WaitTimeout(ClusterkitError, TimeoutError):
    """:meth:`Job.wait` gave up after its ``timeout``; the job goes on."""

    exit_code = ExitCode.FAILURE


@dataclass(frozen=True)
class JobResult:
    """How a job ended."""

    state: JobState                 #: its terminal state (COMPLETED, FAILED, CANCELLED, TIMEOUT, LOST, ...)
    exit_code: int | None           #: the job's exit code, when it exited
    signal: int | None              #: the signal that killed it, when one did
    status: JobStatus               #: the scheduler's full view (reason, nodes, restarts)
    tails: list[LogTail]            #: the last lines of each log file
    cache_failures: list[str] = field(default_factory=list)  #: the final state could not be saved in the record

    @property
    def ok(self) -> bool:
        """Whether the job completed with exit code 0."""
        return self.state == JobState.COMPLETED and not self.exit_code

    @property
    def exit_status(self) -> int:
        """The exit status a shell would see (128 + signal for a killed job); ``submit --wait``'s."""
        from clusterkit.scheduler.status import exit_status_of

        return exit_status_of(self.status)


class LogLine(str):
    """One line of a job's log (without its newline); :attr:`path` is the file it is from."""

    path: Path

    def __new__(cls, text: str, path: Path) -> LogLine:
        line = super().__new__(cls, text)
        line.path = path
        return line


class Job:
    """A submitted job: its record, and what can be asked of it or done to it.

    Get one from :meth:`Site.submit`, :meth:`Job.find` or :func:`jobs`.
    """

    def __init__(self, record: JobRecord, store: RecordStore | None = None, *,
                 unsaved: RecordError | None = None, run: RunDir | None = None, untagged: str | None = None) -> None:
        self._record = record
        self._store = _store(store)
        #: when set, the job is submitted but its record could not be saved (``Job.find`` does not know it)
        self.unsaved: RecordError | None = unsaved
        #: when set, why Slurm's copy of the job lacks its run tag (``status --run`` finds it by its record)
        self.untagged: str | None = untagged
        #: the rendered run directory, for a job submitted by this process
        self.run: RunDir | None = run

    @classmethod
    def find(cls, ref: str, *, store: RecordStore | None = None) -> Job:
        """The job named ``ref``: a job id as ``submit`` printed it (the newest record with that
        id), or ``SITE:JOB_ID``.  Raises :class:`~clusterkit.errors.RecordError` if none."""
        from .inputs import of

        store = _store(store)
        return cls(store.find(of("ref", ref, "text")), store)

    @classmethod
    def latest(cls, *, store: RecordStore | None = None, skipped: list[RecordError] | None = None) -> Job:
        """The job submitted last (the newest record of this user's records directory).  Raises
        :class:`~clusterkit.errors.NoJobRecord` when there is none.  With ``skipped``, newer records
        that cannot be read (truncated, wrong types) are passed over and listed there, up to
        100 of them (and none readable is :class:`~clusterkit.errors.NoJobRecord`); without it, an
        unreadable newest record is the error."""
        store = _store(store)
        if skipped is None:
            return cls(store.latest(), store)
        for path in reversed(store.files()[-100:]):
            try:
                return cls(load_record(path), store)
            except RecordError as err:
                skipped.append(err)
        if skipped:   # none readable: each said (a warning), then as a directory with no record
            raise NoJobRecord(f"no readable job record in {store.root} ({len(skipped)} unreadable, skipped)")
        return cls(store.latest(), store)   # none at all

    @property
    def id(self) -> str:
        """The scheduler's job id (Slurm's, or the local executor's)."""
        return self._record.job_id

    @property
    def key(self) -> str:
        """``SITE:JOB_ID``, the unambiguous name of this job."""
        return self._record.key

    @property
    def record(self) -> JobRecord:
        """What clusterkit keeps about the job (site, stage, launcher, run directory, final state)."""
        return self._record

    @property
    def run_dir(self) -> Path:
        """The job's run directory."""
        return Path(self._record.run_dir)

    def __repr__(self) -> str:
        return f"Job({self.key!r})"

    def status(self) -> JobStatus:
        """The job's status now (one scheduler query); a final state is cached in the record.

        While the Slurm controller does not answer, the status is the last one known, ``stale``.
        """
        return self.look().status

    def state(self) -> JobState:
        """The job's state now: ``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ... (``UNKNOWN``
        while the Slurm controller does not answer)."""
        return self.status().state

    def look(self, *, tail_lines: int = 20) -> Look:
        """``clusterkit status JOB``: the status, the log tails once it ended, and what could not
        be done on the way (the controller did not answer, the record could not be updated)."""
        from clusterkit.scheduler import jobs as job_fns

        seen = job_fns.look(self._store, self.key, tail_lines=tail_lines)
        self._record = seen.record
        return seen

    def queue_place(self) -> Spot | None:
        """While the job is pending on Slurm: its place in the queue and Slurm's start estimate
        (one squeue call); None for a job Slurm does not list as pending, or a local job."""
        from clusterkit.scheduler.slurm.queue import spot

        return spot(self._record.job_id) if traits(self._record.scheduler).queued else None

    def wait_started(self, on_change: Callable[[JobStatus], None] | None = None, *,
                     on_poll: Callable[[JobStatus], None] | None = None) -> JobStatus:
        """Wait until the job left the queue (any state but PENDING); ``on_change`` hears each new
        state and, while it is pending, each new reason Slurm gives (Priority, Resources, ...);
        ``on_poll`` hears every status polled."""
        from clusterkit.scheduler.status import wait_started

        return wait_started(self._record, on_change=on_change, on_poll=on_poll)

    def wait(self, timeout: float | None = None, *,
             on_change: Callable[[JobStatus], None] | None = None,
             on_poll: Callable[[JobStatus], None] | None = None) -> JobResult:
        """Wait until the job ended; its :class:`JobResult`.  ``on_change`` hears each new state,
        ``on_poll`` every status polled.

        With ``timeout`` (seconds), raises :class:`WaitTimeout` if the job has not ended by then.
        A controller outage is waited out (the job is UNKNOWN, not ended).
        """
        from clusterkit.scheduler import jobs as job_fns
        from clusterkit.scheduler.status import heard_key, refresh

        if timeout is not None:
            deadline = time.monotonic() + timeout
            delay, last, heard = 0.5, None, None
            while True:
                (_, st), = refresh([self._record])
                if heard != heard_key(st) and on_change is not None:
                    on_change(st)
                if on_poll is not None:
                    on_poll(st)
                heard = heard_key(st)
                if st.terminal:
                    break
                if time.monotonic() >= deadline:
                    raise WaitTimeout(f"job {self.id} still {st.state} after {timeout:g} s")
                delay = 0.5 if st.state != last else min(5.0, delay * 1.5)
                last = st.state
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            on_change = on_poll = None  # already heard; follow_to_end confirms the end and reads the tails
        seen = job_fns.follow_to_end(self._store, self._record, on_change=on_change, on_poll=on_poll)
        self._record = seen.record
        st = seen.status
        return JobResult(st.state, st.exit_code, st.signal, st, seen.tails, seen.cache_failures)

    def log_files(self) -> list[Path]:
        """The job's log files: the batch log first, then one per node or rank."""
        from clusterkit.scheduler.jobs import log_files

        return log_files(self._record)

    def logs(self, follow: bool = False, *, tail: int = 0, poll_s: float = 1.0, rank: int | None = None,
             node: str | None = None) -> Iterator[LogLine]:
        """The lines of the job's logs, file after file (each :class:`LogLine` knows its
        :attr:`~LogLine.path`); with ``tail``, only the last ``tail`` lines of each file.  With
        ``follow``, keep yielding new lines as they are written, like ``tail -f`` on every file,
        until the job ended and its last lines were read.  ``rank``/``node``: only that rank's or
        node's lines (:mod:`clusterkit.diagnose.logfilter`)."""
        if follow:
            pick = self._filter(rank, node)
            yield from (line for line in self._follow(poll_s) if pick is None or pick.keeps(line, line.path))
            return
        for p, lines in self.log_lines(tail, rank=rank, node=node).items():
            for line in lines:
                yield LogLine(line, p)

    @staticmethod
    def _filter(rank: int | None, node: str | None) -> LogFilter | None:
        from clusterkit.diagnose.logfilter import LogFilter

        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 0):
            raise InputError("must be a rank, a whole number from 0", field="rank", value=repr(rank))
        return None if rank is None and node is None else LogFilter(rank, node)

    def log_lines(self, tail: int = 0, *, rank: int | None = None, node: str | None = None) -> dict[Path, list[str]]:
        """Each log file (batch log first) and its lines, or its last ``tail`` lines (0: all);
        ``rank``/``node``: only that rank's or node's lines, files with none left out."""
        pick = self._filter(rank, node)
        if pick is not None:
            kept = {p: [ln for ln in lines if pick.keeps(ln, p)] for p, lines in self.log_lines().items()}
            return {p: lines[-tail:] if tail else lines for p, lines in kept.items() if lines}
        from clusterkit.scheduler.logs import read_log
        from clusterkit.scheduler.logs import tail as last_lines

        if isinstance(tail, bool) or not isinstance(tail, int) or tail < 0:
            raise InputError("must be a whole number of lines, 0 for all", field="tail", value=repr(tail))

        def whole(p: Path) -> list[str]:  # within the cap of read_log; unreadable: no lines
            try:
                return read_log(p)[0].splitlines()
            except OSError:
                return []
        return {p: last_lines(p, tail) if tail else whole(p) for p in self.log_files()}

    def _follow(self, poll_s: float) -> Iterator[LogLine]:
        from clusterkit.safefile import open_regular
        from clusterkit.scheduler.jobs import has_ended

        offsets: dict[Path, int] = {}
        partial: dict[Path, bytes] = {}
        ended = False
        while True:
            for p in self.log_files():
                try:  # regular files only, never through a symlink; 1 MiB a file a pass
                    with open_regular(p, follow_symlinks=False) as fh:
                        fh.seek(offsets.get(p, 0))
                        data = fh.read(1 << 20)
                except OSError:
                    continue
                offsets[p] = offsets.get(p, 0) + len(data)
                *whole, rest = (partial.pop(p, b"") + data).split(b"\n")
                for line in whole:
                    yield LogLine(line.decode("utf-8", errors="replace"), p)
                if rest and (ended or len(rest) > 1 << 20):  # a line without end is cut at 1 MiB
                    yield LogLine(rest.decode("utf-8", errors="replace"), p)
                elif rest:
                    partial[p] = rest
            if ended:
                return
            ended = has_ended(self._record)  # one more pass after the end to drain the last lines
            time.sleep(min(poll_s, 0.2) if ended else poll_s)

    def cancel(self, now: bool = False, *, on_grace: OnGrace | None = None) -> Cancellation:
        """Cancel the job unless its scheduler reports it ended.  A running Slurm job's ranks get
        SIGTERM and up to the site's ``scheduler.grace_s`` seconds to save first, unless ``now``;
        ``on_grace(seconds)`` is told before that wait.  A cancelled job is never requeued."""
        from clusterkit.scheduler.jobs import cancel_job

        done = cancel_job(self._store, self.key, now=now, on_grace=on_grace)
        self._record = done.record
        return done

    def dropped_nodes(self) -> list[NodeVerdict]:
        """The nodes the job's in-job preflight dropped (any restart), with their verdicts and
        figures, read from its run directory (``logs/nodes-<job>.r<restart>.json``, validated)."""
        from clusterkit.preflight.choose import ChooseError, NodeVerdict, dropped_nodes

        if not traits(self.record.scheduler).allocates:
            return []
        spares = self.record.plan.get("spares", 0) if isinstance(self.record.plan, dict) else 0
        allocated = self.record.nnodes + spares if isinstance(spares, int) and not isinstance(spares, bool) else None
        try:   # only selections of an allocation of the job's size: a forged file cannot outgrow it
            found = dropped_nodes(self.run_dir, self.record.job_id, allocated)
        except ChooseError:
            found = []
        later = {v.host: v for v in found}   # and the nodes a failed attempt lost (logs/attempts-*.json)
        for host, why in supervise_attempts.dropped(self.run_dir, self.record.job_id):
            later.pop(host, None)
            later[host] = NodeVerdict(host, "failed", why)
        return list(later.values())

    def attempts(self) -> list[dict[str, object]]:
        """The failed attempts inside the allocation (each run's), as ``logs/attempts-<job>.r<restart>.json``
        record them: the nodes, the status, doctor's verdict, the nodes dropped and why, what followed."""
        if not traits(self.record.scheduler).allocates:
            return []
        return [{"restart": r, "attempt": a.attempt, "nodes": list(a.nodes), "status": a.status, "verdict": a.verdict,
                 "dropped": [{"host": h, "why": w} for h, w in a.dropped], "then": a.then}
                for r, a in supervise_attempts.read(self.run_dir, self.record.job_id)]

    def stragglers(self) -> dict[str, Any]:
        """Its ranks' own progress files (``clusterkit.progress`` on every rank): how many report
        and which are persistently slower than the others (``straggler_ratio``), with their nodes."""
        from clusterkit.api.ranks import view

        return view(self.record)

    def teardown(self) -> list[dict[str, int]]:
        """The job's teardown steps that have run, ``{"step": N, "status": S}`` each (``<job>.teardown``,
        read as data); the training's own status is :meth:`state`'s, which the steps never change."""
        from clusterkit.scheduler.results import read_teardown_file

        return [{"step": n, "status": rc} for n, rc in read_teardown_file(self.run_dir, self.record.job_id)]

    def doctor(self, progress: ProgressBar | None = None) -> Diagnosis:
        """``clusterkit doctor JOB``: why the job ended as it did, from its logs and the scheduler's
        view: ``diagnosis.report["verdict"]`` (category, summary, node, rank, evidence, advice),
        with cascades counted apart.  The verdict is cached in the record for ``status``.
        ``progress(total_bytes)`` may return a context manager yielding a callback that is told
        the bytes read (the CLI's progress bar)."""
        found = doctor_job(self.key, progress, store=self._store)
        self._record = self._store.find(self.key)
        return found


def jobs(limit: int = 20, *, store: RecordStore | None = None) -> Overview:
    """``clusterkit status``: the ``limit`` most recent jobs, refreshed in one batch per scheduler.

    ``overview.rows`` are ``status --json``'s rows, oldest first; ``unreadable`` the records that
    could not be read; ``unreachable`` says when the Slurm controller did not answer (those
    jobs show their last known state, ``stale``).  ``Job.find(row["job"])`` gives the job.
    """
    from clusterkit.scheduler import jobs as job_fns

    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InputError("must be a whole number of at least 1", field="limit", value=repr(limit))
    return job_fns.overview(_store(store), limit)


def doctor_job(ref: str, progress: ProgressBar | None = None, *, store: RecordStore | None = None) -> Diagnosis:
    """``clusterkit doctor JOB``: :meth:`Job.doctor` for the job named ``ref`` (``JOB_ID`` or
    ``SITE:JOB_ID``).  A name no record has is an :class:`~clusterkit.errors.InputError` here.
    A verdict that blames a node goes into the site's node history (``clusterkit nodes``); a
    history that cannot be written is one of the diagnosis's notes."""
    from clusterkit.diagnose import diagnose_job
    from clusterkit.history.book import record_diagnosis

    from .inputs import of

    of("ref", ref, "text")
    store = _store(store)
    found = diagnose_job(ref, progress, store)
    found.notes.extend(record_diagnosis(store.find(ref), found.report))
    return found


def diagnose_logs(paths: Sequence[StrPath], progress: ProgressBar | None = None) -> Diagnosis:
    """``clusterkit doctor --logs PATH...``: the verdict from log files (and directories of
    them) of any job, submitted by clusterkit or not."""
    from clusterkit.diagnose import diagnose_logs as diagnose

    from .inputs import of

    return diagnose([Path(p) for p in of("paths", paths, "paths")], progress)
