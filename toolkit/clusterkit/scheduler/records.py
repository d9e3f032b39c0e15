"""Job records and job status: versioned JSON on disk, state from the scheduler in a few calls.

A :class:`JobRecord` is written (atomically: temp file + rename) for every submission, into
the records directory: ``$CLUSTERKIT_STATE_DIR/jobs`` if that variable is set, else
``$XDG_STATE_HOME/clusterkit/jobs`` (``~/.local/state/clusterkit/jobs``).  One file per
submission, named ``<UTC timestamp>-<site>-<job id>.json`` so that twenty parallel submits
give twenty files, and a recycled job id (local pids, a re-installed Slurm) never overwrites
an older record.

Status for many jobs costs a constant number of scheduler calls, never one per job:

1. one ``squeue --states=all -j ID,ID,...``: pending/running jobs and finished ones still in
   slurmctld's memory (``MinJobAge``);
2. one ``sacct -X -j ID,ID,...``: exit codes, and jobs slurmctld has already forgotten;
3. only when sacct fails (no slurmdbd: "accounting storage is disabled", or no sacct at
   all): one ``scontrol -o show job`` for exit codes and restart counts.

A job none of them knows any more, and that left no result file, is reported ``LOST``: a
terminal state, so ``--wait`` and status never hang on a job that died without a trace.
Terminal states are cached in the record and answer for jobs Slurm has forgotten.

"Ended" is never concluded from silence: when squeue fails for any reason other than "these
job ids are unknown" (a busy controller timing out, an authentication failure, no squeue at
all), every Slurm job is ``UNKNOWN`` and ``stale`` (its cached or result-file state, if any,
is shown instead, still marked stale), local jobs are unaffected, and nothing stale is cached.

Records are updated under a lock on the records directory: the current file is re-read and
only the changed fields are written back, so a ``status`` caching a final state and a
``cancel`` setting ``cancel_requested`` at the same moment both keep their update.

Parsers here are total: an unexpected line becomes ``UNKNOWN`` with the raw text kept.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from clusterkit.errors import ExitCode, RecordError, SubmitError

RECORD_VERSION = 1
SchedulerKind = Literal["slurm", "local"]

# States after which a job never runs again (Slurm's names, plus LOST for vanished jobs).
TERMINAL = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
    "DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "LOST",
})
# squeue's only failure that is an answer: none of the ids asked about is known to slurmctld.
_NO_SUCH_JOBS = re.compile(r"Invalid job id specified", re.I)


class SlurmUnreachable(SubmitError):
    """slurmctld did not answer (timed out, refused, authentication failed, client missing)."""

    exit_code = ExitCode.UNREACHABLE


# --------------------------------------------------------------------------- the record


class JobRecord(BaseModel):
    """What clusterkit remembers about one submission (schema version :data:`RECORD_VERSION`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = RECORD_VERSION
    job_id: str
    scheduler: SchedulerKind
    site: str
    site_source: str
    stage: str
    launcher: str
    job_name: str
    nnodes: int
    world_size: int
    command: list[str]
    run_dir: str
    script: str
    submitted_at: str
    host: str
    plan: dict[str, Any]
    # cached final status: set once the job reached a terminal state
    state: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    cancel_requested: bool = False
    # `clusterkit doctor`'s one-line verdict, cached for `status` (which never reads logs itself)
    diagnosis: str | None = None

    @property
    def key(self) -> str:
        """``SITE:JOB_ID``, the unambiguous way to name this job on the command line."""
        return f"{self.site}:{self.job_id}"

    @property
    def result_file(self) -> Path:
        """Where the job script writes its exit status when it ends for good (not on requeue)."""
        return result_file(Path(self.run_dir), self.job_id)


def result_file(run_dir: Path, job_id: str) -> Path:
    """The result file of ``job_id`` in ``run_dir``: one line, the job script's exit status."""
    return run_dir / f"{job_id}.result"


def read_result_file(path: Path) -> int | None:
    """The exit status in a result file, or None when there is none (yet) or it is garbled."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if re.fullmatch(r"-?\d{1,3}", text) else None


def now_utc() -> str:
    """The current time as an ISO-8601 UTC string with microseconds (sorts as text)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --------------------------------------------------------------------------- the store


def records_dir() -> Path:
    """The directory holding job records (see the module docstring for the lookup order)."""
    state = os.environ.get("CLUSTERKIT_STATE_DIR")
    if state:
        return Path(state).expanduser() / "jobs"
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg).expanduser() / "clusterkit" / "jobs"


def _file_name(rec: JobRecord) -> str:
    stamp = re.sub(r"[^0-9T]", "", rec.submitted_at)
    safe_site = re.sub(r"[^A-Za-z0-9_.-]", "_", rec.site)
    return f"{stamp}-{safe_site}-{rec.job_id}.json"


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so readers see the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RecordStoreError(RecordError):
    """The records directory cannot take a record: a setup problem, found before submitting."""

    exit_code = ExitCode.USAGE


@dataclass
class RecordStore:
    """The records directory: save, load, find."""

    root: Path = field(default_factory=records_dir)

    def path_for(self, rec: JobRecord) -> Path:
        return self.root / _file_name(rec)

    def save(self, rec: JobRecord) -> Path:
        """Write (or rewrite) ``rec`` atomically; returns its path."""
        path = self.path_for(rec)
        try:
            atomic_write_text(path, rec.model_dump_json(indent=2) + "\n")
        except OSError as exc:
            raise RecordError(f"{path}: cannot write job record: {exc.strerror or exc}") from exc
        return path

    def check_writable(self) -> None:
        """Refuse, before anything is submitted, a records directory that cannot take a record.

        Creates the directory and a probe file, as a save would: permission bits alone do not
        tell (root, read-only mounts, quotas, ACLs).
        """
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".probe.", suffix=".tmp", dir=self.root)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise RecordStoreError(f"job records directory {self.root} is not writable "
                                   f"({exc.strerror or exc}); nothing submitted; set CLUSTERKIT_STATE_DIR "
                                   "to a writable directory") from None

    def update(self, rec: JobRecord, **fields: Any) -> JobRecord:
        """Set ``fields`` on the record as it is on disk now, and write it back atomically.

        The file is re-read under the store's lock, so an update made by another command since
        ``rec`` was loaded (a ``cancel`` while a ``status`` runs) is kept, not overwritten.
        """
        path = self.path_for(rec)
        with self._locked():
            current = load_record(path) if path.exists() else rec
            new = current.model_copy(update=fields)
            self.save(new)
        return new

    @contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self.root / ".lock"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise RecordError(f"{lock}: cannot lock the job records: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the flock

    def files(self) -> list[Path]:
        """Record files, oldest first (names start with the submission time)."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.glob("*.json") if not p.name.startswith("."))

    def load_all(self) -> tuple[list[JobRecord], list[RecordError]]:
        """Every readable record (oldest first) and an error for each unreadable one."""
        good: list[JobRecord] = []
        bad: list[RecordError] = []
        for path in self.files():
            try:
                good.append(load_record(path))
            except RecordError as err:
                bad.append(err)
        return good, bad

    def find(self, ref: str) -> JobRecord:
        """The record named by ``JOB_ID`` or ``SITE:JOB_ID`` (the newest if an id repeats)."""
        site, _, job_id = ref.rpartition(":")
        if not job_id:
            raise RecordError(f"{ref!r}: expected a job id or SITE:JOB_ID")
        candidates = [p for p in self.files() if p.stem.endswith(f"-{job_id}")]
        matches: list[JobRecord] = []
        for path in candidates:
            rec = load_record(path)  # a bad record named like the job: say so, never skip it
            if rec.job_id == job_id and (not site or rec.site == site):
                matches.append(rec)
        if not matches:
            raise RecordError(f"no job record for {ref!r} in {self.root} (see `clusterkit status`)")
        return matches[-1]


def load_record(path: Path) -> JobRecord:
    """Read one record; refuse, with the reason, anything that is not a current record."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RecordError(f"{path}: cannot read job record: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise RecordError(f"{path}: not a job record (not UTF-8 text at byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}: not a job record (invalid JSON at line {exc.lineno})") from exc
    except RecursionError as exc:
        raise RecordError(f"{path}: not a job record (JSON nested too deeply)") from exc
    if not isinstance(data, dict) or "version" not in data:
        raise RecordError(f"{path}: not a clusterkit job record (no 'version' field)")
    version = data["version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError(f"{path}: job record version {version!r} is not an integer")
    data = migrate(data, version, path)
    try:
        return JobRecord.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"]) or "(record)"
        raise RecordError(f"{path}: job record version {version}: {loc}: {first['msg']}") from exc


# Record schema history: version -> function upgrading a record of that version by one step.
# Version 1 is the first released schema; add an entry here with every bump, never edit one.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def migrate(data: dict[str, Any], version: int, path: Path) -> dict[str, Any]:
    """Bring ``data`` to :data:`RECORD_VERSION`, or refuse it with the reason."""
    if version > RECORD_VERSION:
        raise RecordError(f"{path}: job record version {version} was written by a newer clusterkit "
                          f"(this one reads up to {RECORD_VERSION}); upgrade clusterkit to read it")
    while version < RECORD_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise RecordError(f"{path}: job record version {version} is older than any this clusterkit "
                              f"can migrate (oldest: 1); resubmit the job or delete the record")
        data = step(data)
        version = data["version"]
    return data


# --------------------------------------------------------------------------- status


@dataclass(frozen=True)
class JobStatus:
    """One job's state as the scheduler (or the result file) reports it."""

    state: str
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    nodes: str | None = None
    restarts: int | None = None
    source: str = "none"
    raw: str | None = None
    # Slurm did not answer: this is the last state known here, not what Slurm says now
    stale: bool = False

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def merged(self, other: "JobStatus") -> "JobStatus":
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


def normalize_state(text: str) -> str:
    """``CANCELLED by 0`` -> ``CANCELLED``; ``COMPLETED+`` -> ``COMPLETED``; '' -> ``UNKNOWN``."""
    word = text.strip().split(" ")[0].rstrip("+*") if text.strip() else ""
    return word.upper() if re.fullmatch(r"[A-Za-z_]+", word) else "UNKNOWN"


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """Slurm's ``EXIT:SIGNAL`` (``3:0``, ``0:15``) -> (3, None) / (None, 15)."""
    m = re.fullmatch(r"\s*(\d+):(\d+)\s*", text or "")
    if not m:
        return None, None
    code, sig = int(m.group(1)), int(m.group(2))
    return (None, sig) if sig else (code, None)


SQUEUE_FORMAT = "%i|%T|%r|%N"


def parse_squeue(text: str) -> dict[str, JobStatus]:
    """Parse ``squeue -h -o '%i|%T|%r|%N'`` output into job id -> status."""
    out: dict[str, JobStatus] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 4 or not parts[0].strip():
            continue
        jid, state, reason, nodes = (p.strip() for p in parts)
        out[jid] = JobStatus(state=normalize_state(state), reason=None if reason in ("", "None") else reason,
                             nodes=nodes or None, source="squeue", raw=line)
    return out


SACCT_FIELDS = "JobIDRaw,State,ExitCode,NodeList"


def parse_sacct(text: str) -> dict[str, JobStatus]:
    """Parse ``sacct -X -P -o JobIDRaw,State,ExitCode,NodeList`` (header line optional).

    Job steps (``123.batch``) are skipped; for a requeued job sacct may print one line per
    run, and the last one (the current run) wins.
    """
    out: dict[str, JobStatus] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 4 or parts[0].strip() in ("", "JobIDRaw", "JobID"):
            continue
        jid, state, code, nodes = (p.strip() for p in parts[:4])
        if not re.fullmatch(r"\d+(_\d+)?", jid):
            continue
        exit_code, sig = parse_exit_code(code)
        out[jid] = JobStatus(state=normalize_state(state), exit_code=exit_code, signal=sig,
                             nodes=None if nodes in ("", "None assigned") else nodes, source="sacct", raw=line)
    return out


_KV = re.compile(r"(\S+?)=(\S*)")


def parse_scontrol_jobs(text: str) -> dict[str, JobStatus]:
    """Parse ``scontrol -o show job`` (one job per line, ``Key=Value`` pairs)."""
    out: dict[str, JobStatus] = {}
    for line in text.splitlines():
        kv = dict(_KV.findall(line))
        jid = kv.get("JobId", "")
        if not jid.isdigit():
            continue
        exit_code, sig = parse_exit_code(kv.get("ExitCode", ""))
        restarts = kv.get("Restarts", "")
        reason = kv.get("Reason", "")
        out[jid] = JobStatus(
            state=normalize_state(kv.get("JobState", "")), exit_code=exit_code, signal=sig,
            reason=None if reason in ("", "None") else reason,
            nodes=None if kv.get("NodeList", "(null)") == "(null)" else kv.get("NodeList"),
            restarts=int(restarts) if restarts.isdigit() else None, source="scontrol", raw=line,
        )
    return out


Run = Callable[[Sequence[str], float], "subprocess.CompletedProcess[str]"]


def run_command(argv: Sequence[str], timeout: float) -> "subprocess.CompletedProcess[str]":
    """The subprocess seam for scheduler queries: never waits longer than ``timeout``."""
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return subprocess.CompletedProcess(list(argv), 127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", f"{argv[0]}: no answer in {timeout:.0f}s")


@dataclass
class SlurmQuery:
    """Queries Slurm for many jobs at once, counting the calls it makes (for tests and bench)."""

    run: Run = run_command
    timeout_s: float = 30.0
    calls: list[list[str]] = field(default_factory=list)
    # set by refresh() when slurmctld did not answer: why (Slurm's own words)
    unreachable: str | None = None

    def _call(self, argv: list[str]) -> "subprocess.CompletedProcess[str]":
        self.calls.append(argv)
        return self.run(argv, self.timeout_s)

    def states(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:
        """job id -> status for every id Slurm still knows (absent ids are unknown to it)."""
        ids = sorted(set(job_ids), key=lambda j: (len(j), j))
        if not ids:
            return {}
        joined = ",".join(ids)
        sq = self._call(["squeue", "-h", "--states=all", "-j", joined, "-o", SQUEUE_FORMAT])
        if sq.returncode != 0 and not _NO_SUCH_JOBS.search(sq.stderr):
            # Any other failure (timeout, refused, authentication, no squeue) says nothing
            # about the jobs: a job absent from an answer that never came has not ended.
            raise SlurmUnreachable(f"cannot reach Slurm controller: {_last_line(sq.stderr)}")
        live = parse_squeue(sq.stdout) if sq.returncode == 0 else {}
        acct = self._call(["sacct", "-X", "-P", "-n", "-j", joined, "-o", SACCT_FIELDS])
        if acct.returncode == 0:
            extra = parse_sacct(acct.stdout)
        else:  # no slurmdbd (or no sacct): slurmctld's own memory has the exit codes
            ctl = self._call(["scontrol", "-o", "show", "job"])
            extra = parse_scontrol_jobs(ctl.stdout) if ctl.returncode == 0 else {}
        out: dict[str, JobStatus] = {}
        for jid in ids:
            a, b = live.get(jid), extra.get(jid)
            st = a.merged(b) if a and b else (a or b)
            if st is None:
                continue
            if not st.terminal:  # slurmctld reports 0:0 for a job that has not ended yet
                st = replace(st, exit_code=None, signal=None)
            out[jid] = st
        return out


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no message)"


def local_status(rec: JobRecord) -> JobStatus:
    """A local job's state: its result file, else whether its controller process still lives."""
    code = read_result_file(rec.result_file)
    if code is not None:
        return _from_result(code, rec)
    if rec.host != socket.gethostname():  # its pid means nothing here
        return JobStatus(state="UNKNOWN", reason=f"local job of host {rec.host}; ask there", source="none")
    if _local_alive(rec.job_id):
        return JobStatus(state="RUNNING", source="process")
    if rec.cancel_requested:
        return JobStatus(state="CANCELLED", source="record")
    return JobStatus(state="LOST", reason="process gone without a result file", source="process")


def _local_alive(pid_text: str) -> bool:
    """Whether ``pid_text`` is a running submitit local controller (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{int(pid_text)}/cmdline").read_bytes()
        stat = Path(f"/proc/{int(pid_text)}/stat").read_text()
    except (OSError, ValueError):
        return False
    return b"submitit.local._local" in cmdline and stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _from_result(code: int, rec: JobRecord) -> JobStatus:
    if rec.cancel_requested and code != 0:
        return JobStatus(state="CANCELLED", exit_code=code, source="result-file")
    return JobStatus(state="COMPLETED" if code == 0 else "FAILED", exit_code=code, source="result-file")


def refresh(records: Sequence[JobRecord], query: SlurmQuery | None = None) -> list[tuple[JobRecord, JobStatus]]:
    """Current status of each record; one batch of Slurm calls for all the Slurm ones.

    Slurm is asked about every Slurm record, even one whose record says it ended: a job can
    be requeued after it ended (``scontrol requeue``, node failure), and slurmctld briefly
    shows odd states while it requeues.  The cached state answers only for jobs Slurm has
    forgotten.
    """
    query = query or SlurmQuery()
    query.unreachable = None
    slurm = [r for r in records if r.scheduler == "slurm"]
    known: dict[str, JobStatus] | None = {}
    try:
        known = query.states(r.job_id for r in slurm) if slurm else {}
    except SlurmUnreachable as exc:
        query.unreachable = str(exc)
        known = None
    out: list[tuple[JobRecord, JobStatus]] = []
    for rec in records:
        if rec.scheduler == "local":
            st = local_status(rec) if rec.state not in TERMINAL else _cached(rec)
        elif known is None:
            st = _stale_status(rec, query.unreachable or "")
        else:
            st = _with_reason(rec, _slurm_status(rec, known.get(rec.job_id)))
        out.append((rec, st))
    return out


def _stale_status(rec: JobRecord, why: str) -> JobStatus:
    """What is known here about a Slurm job while slurmctld does not answer."""
    code = read_result_file(rec.result_file)
    if code is not None:  # the job script wrote its exit status: it ended for good
        return replace(_from_result(code, rec), stale=True)
    if rec.state in TERMINAL:
        return replace(_cached(rec), stale=True)
    return JobStatus(state="UNKNOWN", reason=why, source="none", stale=True)


def may_still_run(st: JobStatus) -> bool:
    """Whether a job could still be running: anything but an end Slurm itself reported now.

    ``cancel`` asks this, so an outage (state UNKNOWN, or a stale cached end) still reaches
    ``scancel``, which is harmless for a job that has in fact ended.
    """
    return st.stale or not st.terminal


def _with_reason(rec: JobRecord, st: JobStatus) -> JobStatus:
    """The job script's own reason for its end (``<job id>.reason``: restart budget spent, ...)
    beats Slurm's generic one (``NonZeroExitCode``)."""
    if not st.terminal:
        return st
    try:
        text = (Path(rec.run_dir) / f"{rec.job_id}.reason").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return st
    reason = text.strip().splitlines()[0][:300] if text.strip() else ""
    return replace(st, reason=reason) if reason else st


def _cached(rec: JobRecord) -> JobStatus:
    return JobStatus(state=rec.state or "UNKNOWN", exit_code=rec.exit_code, signal=rec.signal,
                     reason=rec.reason, source="record")


def _slurm_status(rec: JobRecord, st: JobStatus | None) -> JobStatus:
    code = read_result_file(rec.result_file)
    if st is None:  # Slurm forgot the job: the record's final state, the result file, or gone
        if rec.state in TERMINAL:
            return _cached(rec)
        if code is not None:
            return _from_result(code, rec)
        return JobStatus(state="LOST", reason="unknown to Slurm and no result file", source="none")
    if st.terminal and st.exit_code is None and st.signal is None and code is not None:
        return replace(st, exit_code=code)
    return st


def remember(store: RecordStore, rec: JobRecord, st: JobStatus) -> JobRecord:
    """Cache a terminal status in the record (so later status calls cost nothing).

    A stale status is never cached: it is what we knew, not what Slurm says.
    """
    if not st.terminal or st.stale or rec.state == st.state:
        return rec
    return store.update(rec, state=st.state, exit_code=st.exit_code, signal=st.signal, reason=st.reason)


def wait(rec: JobRecord, *, poll_s: float = 0.5, max_poll_s: float = 5.0, outage_max_s: float = 20.0,
         confirm_s: float = 1.0, query: SlurmQuery | None = None,
         on_change: Callable[[JobStatus], None] | None = None) -> JobStatus:
    """Poll until the job reaches a terminal state (LOST included, so this always ends).

    An end without a result file is confirmed by a second look ``confirm_s`` later: while
    slurmctld requeues a job it can show a terminal state for a moment.  While slurmctld does
    not answer, the job is UNKNOWN (not ended) and polling backs off to ``outage_max_s``, so
    an outage of any length is waited out without adding to the controller's load.
    """
    last: str | None = None
    delay = poll_s
    while True:
        (_, st), = refresh([rec], query)
        if st.terminal and not st.stale and read_result_file(rec.result_file) is None and rec.scheduler == "slurm":
            time.sleep(confirm_s)
            (_, st), = refresh([rec], query)
        if st.state != last and on_change is not None:
            on_change(st)
        if st.terminal:
            return st
        delay = _next_delay(st, changed=st.state != last, delay=delay, poll_s=poll_s,
                            cap=outage_max_s if st.stale else max_poll_s)
        last = st.state
        time.sleep(delay)


def _next_delay(st: JobStatus, *, changed: bool, delay: float, poll_s: float, cap: float) -> float:
    if st.stale:  # an overloaded controller is the usual cause: ask it less and less often
        return min(cap, delay * 2)
    return poll_s if changed else min(cap, delay * 1.5)


def cancel_local(rec: JobRecord) -> bool:
    """SIGTERM a local job's controller (it forwards the signal to the job script)."""
    if not _local_alive(rec.job_id):
        return False
    os.kill(int(rec.job_id), signal.SIGTERM)
    return True


def exit_status_of(st: JobStatus) -> int:
    """The exit status a shell would see for this job (128+signal for a killed one)."""
    if st.exit_code is not None:
        return st.exit_code
    if st.signal is not None:
        return 128 + st.signal
    return 0 if st.state == "COMPLETED" else 1


def summarize(rec: JobRecord, st: JobStatus) -> Mapping[str, Any]:
    """The JSON shape of one job's status (what ``status --json`` prints)."""
    return {
        "job": rec.key, "job_id": rec.job_id, "site": rec.site, "stage": rec.stage,
        "launcher": rec.launcher, "name": rec.job_name, "nodes": rec.nnodes, "world_size": rec.world_size,
        "state": st.state, "exit_code": st.exit_code, "signal": st.signal, "reason": st.reason,
        "node_list": st.nodes, "restarts": st.restarts, "source": st.source, "stale": st.stale,
        "submitted_at": rec.submitted_at, "run_dir": rec.run_dir, "diagnosis": rec.diagnosis,
    }


# --------------------------------------------------------------------------- logs

LOG_SUFFIXES = (".out", ".err", ".log")


def log_files(rec: JobRecord) -> list[Path]:
    """The job's log files in its run directory: the batch log first, then per node / rank.

    Matches files in the run directory and its ``logs/`` whose name holds the job id as a
    whole number (``slurm-123.out``, ``123.node1.out``, ``123.rank3.out``, ``123_0_log.err``).
    """
    token = re.compile(rf"(^|[^0-9]){re.escape(rec.job_id)}([^0-9]|$)")
    run_dir = Path(rec.run_dir)
    found = [p for d in (run_dir, run_dir / "logs") if d.is_dir() for p in d.iterdir()
             if p.is_file() and p.suffix in LOG_SUFFIXES and token.search(p.name)]

    def order(p: Path) -> tuple[int, str]:
        main = p.name.startswith("slurm-") or p.name.startswith(f"{rec.job_id}_0_log")
        return (0 if main else 1, _natural(p.name))

    return sorted(found, key=order)


def _natural(name: str) -> str:
    return re.sub(r"\d+", lambda m: m.group(0).zfill(8), name)


def tail(path: Path, lines: int = 20, max_bytes: int = 256 * 1024) -> list[str]:
    """The last ``lines`` lines of ``path`` (reading at most ``max_bytes`` from its end)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-lines:]
