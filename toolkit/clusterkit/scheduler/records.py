"""Job records: versioned JSON on disk, one file per submission, written atomically.

A :class:`JobRecord` is written (atomically: temp file + rename) for every submission, into
the records directory: ``$CLUSTERKIT_STATE_DIR/jobs`` if that variable is set, else
``$XDG_STATE_HOME/clusterkit/jobs`` (``~/.local/state/clusterkit/jobs``).  One file per
submission, named ``<UTC timestamp>-<site>-<job id>.json`` so that twenty parallel submits
give twenty files, and a recycled job id (local pids, a re-installed Slurm) never overwrites
an older record.  Terminal states are cached in the record (see :mod:`.status`) and answer
for jobs Slurm has forgotten.

Records are updated under a lock on the records directory: the current file is re-read and
only the changed fields are written back, so a ``status`` caching a final state and a
``cancel`` setting ``cancel_requested`` at the same moment both keep their update.

A record whose schema is older is migrated on load (:data:`MIGRATIONS`); a newer one is
refused with the reason.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from clusterkit.errors import ExitCode, NoJobRecord, RecordError
from clusterkit.safefile import NotRegular, read_capped
from clusterkit.scheduler.array_tasks import task_fields
from clusterkit.scheduler.results import result_file
from clusterkit.tooltext import load_json
from clusterkit.vocab import JobState, SchedulerKind, is_job_id

RECORD_VERSION = 1
OPEN_INDEX = ".open"  # directory of markers: records whose job has not ended
RECORD_MAX_BYTES = 1 << 20  # a record is a few KB; a bigger file is not one of ours
# entries read from the records directory (and from its open index): a directory flooded with
# files is refused in one line, never listed into memory (a record is one file per job)
MAX_RECORD_FILES = 200_000


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
    state: JobState | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    cancel_requested: bool = False
    # `clusterkit doctor`'s one-line verdict, cached for `status` (which never reads logs itself)
    diagnosis: str | None = None

    @field_validator("job_id")
    @classmethod
    def _job_id(cls, value: str) -> str:
        # the id names files (the record's, ``<id>.result``) and is handed to scancel: a record
        # anyone could edit must not make it a path or an option
        if not is_job_id(value):
            raise ValueError(f"{value[:40]!r} is not a job id (digits, or ARRAYID_TASK)")
        return value

    @property
    def key(self) -> str:
        """``SITE:JOB_ID``, the unambiguous way to name this job on the command line."""
        return f"{self.site}:{self.job_id}"

    @property
    def result_file(self) -> Path:
        """Where the job script writes its exit status when it ends for good (not on requeue)."""
        return result_file(Path(self.run_dir), self.job_id)


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


class JobRefError(NoJobRecord):
    """A job named on the command line by something that is not ``JOB_ID`` or ``SITE:JOB_ID``
    (exit 2, as every JOB that names no record)."""


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
            self._mark_open(path.name, rec.state is None or not rec.state.is_terminal)
        except OSError as exc:
            raise RecordError(f"{path}: cannot write job record: {exc.strerror or exc}") from exc
        return path

    # The open index: an empty file ``.open/<record file name>`` for every record whose job
    # has not reached a terminal state, so that ``status`` finds them without reading every
    # record ever written.  Built once from the records themselves where it is missing (a
    # directory written by an older clusterkit); a marker whose record is gone is ignored.

    @property
    def _open_dir(self) -> Path:
        return self.root / OPEN_INDEX

    def _mark_open(self, name: str, is_open: bool) -> None:
        self._ensure_open_index()
        marker = self._open_dir / name
        if is_open:
            marker.touch()
        else:
            marker.unlink(missing_ok=True)

    def _ensure_open_index(self) -> None:
        """Build the open index from the records if it is missing (atomically: a rename)."""
        if self._open_dir.is_dir():
            return
        tmp = Path(tempfile.mkdtemp(prefix=f"{OPEN_INDEX}.", suffix=".tmp", dir=self.root))
        try:
            for path in self.files():
                try:
                    rec = load_record(path)
                except RecordError:  # kept in view: status warns about it each time
                    (tmp / path.name).touch()
                    continue
                if rec.state is None or not rec.state.is_terminal:
                    (tmp / path.name).touch()
            os.rename(tmp, self._open_dir)
        except OSError:
            if not self._open_dir.is_dir():
                raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def open_names(self) -> set[str] | None:
        """Names of the records not known to have ended (None: no index, and none can be written)."""
        try:
            self._ensure_open_index()
            return set(_names(self._open_dir))
        except OSError:
            return None

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
            new = JobRecord.model_validate({**current.model_dump(), **fields})  # fields checked too
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
        try:
            names = [n for n in _names(self.root) if n.endswith(".json") and not n.startswith(".")]
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [self.root / n for n in sorted(names)]

    def recent(self, limit: int) -> tuple[list[JobRecord], list[RecordError]]:
        """The newest ``limit`` records plus every older one whose job has not ended (oldest
        first), and an error for each unreadable one among them.  Only those are read."""
        files = self.files()
        older, newest = files[:-limit], files[-limit:]
        open_now = self.open_names()
        picked = older if open_now is None else [p for p in older if p.name in open_now]
        return self._load(picked + newest)

    def load_all(self) -> tuple[list[JobRecord], list[RecordError]]:
        """Every readable record (oldest first) and an error for each unreadable one."""
        return self._load(self.files())

    @staticmethod
    def _load(paths: list[Path]) -> tuple[list[JobRecord], list[RecordError]]:
        good: list[JobRecord] = []
        bad: list[RecordError] = []
        for path in paths:
            try:
                good.append(load_record(path))
            except RecordError as err:
                bad.append(err)
        return good, bad

    def latest(self) -> JobRecord:
        """The newest record: the job submitted last from this records directory (this user's).
        An unreadable newest record is an error, never skipped for an older job."""
        files = self.files()
        if not files:
            raise NoJobRecord(f"no job records in {self.root} yet (submit a job, or name one)")
        return load_record(files[-1])

    def find(self, ref: str) -> JobRecord:
        """The record named by ``JOB_ID`` or ``SITE:JOB_ID`` (the newest if an id repeats)."""
        site, _, job_id = ref.rpartition(":")
        if not is_job_id(job_id):
            raise JobRefError(f"{ref[:80]!r}: expected a job id or SITE:JOB_ID")
        candidates = [p for p in self.files() if p.stem.endswith(f"-{job_id}")]
        matches: list[JobRecord] = []
        for path in candidates:
            rec = load_record(path)  # a bad record named like the job: say so, never skip it
            if rec.job_id == job_id and (not site or rec.site == site):
                matches.append(rec)
        if not matches and "_" in job_id:   # ARRAYJOB_TASK: a task of an array's record
            base, index = job_id.split("_")
            whole = self.find(f"{site}:{base}" if site else base)   # arrays.task_view, without its imports
            return whole.model_copy(update=task_fields(whole.job_id, whole.plan, whole.state, int(index)))
        if not matches:
            raise NoJobRecord(f"no job record for {ref!r} in {self.root} (see `clusterkit status`)")
        return matches[-1]


def _names(directory: Path) -> list[str]:
    """The names in ``directory``, at most MAX_RECORD_FILES of them, else a RecordError."""
    names: list[str] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if len(names) >= MAX_RECORD_FILES:
                raise RecordError(f"{directory}: more than {MAX_RECORD_FILES} files in the job records directory "
                                  "(the limit); move old records out of it")
            names.append(entry.name)
    return names


def load_record(path: Path) -> JobRecord:
    """Read one record; refuse, with the reason, anything that is not a current record."""
    try:
        raw, cut = read_capped(path, RECORD_MAX_BYTES)
        if cut:
            raise RecordError(f"{path}: not a job record (larger than {RECORD_MAX_BYTES // 1024} KiB)")
        data = load_json(raw.decode("utf-8"), unique_keys=True)   # strict: one value per key, finite, bounded
    except NotRegular as exc:
        raise RecordError(f"{path}: not a job record ({exc.strerror})") from None
    except OSError as exc:
        raise RecordError(f"{path}: cannot read job record: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise RecordError(f"{path}: not a job record (not UTF-8 text at byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}: not a job record (invalid JSON at line {exc.lineno})") from exc
    except ValueError as exc:  # a key twice, NaN, a huge integer, nesting too deep
        raise RecordError(f"{path}: not a job record ({str(exc)[:80]})") from exc
    if not isinstance(data, dict) or "version" not in data:
        raise RecordError(f"{path}: not a clusterkit job record (no 'version' field)")
    version = data["version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError(f"{path}: job record version {version!r} is not an integer")
    data = migrate(data, version, path)
    try:
        rec = JobRecord.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first["loc"]) or "(record)"
        raise RecordError(f"{path}: job record version {version}: {loc}: {first['msg']}") from exc
    if not path.name.endswith(_file_name(rec).split("-", 1)[1]):  # a copy under another job's name: not listed twice
        raise RecordError(f"{path}: not a job record (its site and job id name another file)")
    return rec


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
