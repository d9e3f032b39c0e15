"""The node history file: one per site in the user's state directory, bounded, written atomically.

``<state>/nodes/<site>.json`` (``<state>`` as for job records: ``$CLUSTERKIT_STATE_DIR``, else
``$XDG_STATE_HOME/clusterkit``, else ``~/.local/state/clusterkit``) holds the failures clusterkit
saw on nodes: each :class:`Event` names a node, when, which job, where the verdict came from
(:data:`SOURCES`) and what it was (a preflight check's name, a doctor category, an in-job
verdict).  The file is data anyone who can write the directory could have forged: it is read
as a regular file only (no symlink, FIFO or device, opened without blocking), within
:data:`MAX_BYTES`, as strict JSON, and every entry is validated field by field; an entry that
is not one is left out and counted, and a file that is not a history at all is ignored with
a one-line warning (:class:`Loaded`), never a traceback.  At most :data:`MAX_EVENTS` events are
kept, the newest; an update is made under a lock and written whole or not at all
(:func:`clusterkit.safefile.write_atomic`), so two commands recording at once both keep theirs.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from clusterkit.hostlist import is_host
from clusterkit.safefile import NotRegular, is_real_dir, read_capped, write_atomic
from clusterkit.tooltext import load_json, printable
from clusterkit.vocab import is_job_id

HISTORY_VERSION = 1
MAX_EVENTS = 5000            # the newest kept; a node that failed 5,000 times needs no more evidence
MAX_BYTES = 4 << 20          # 5,000 events of at most ~500 bytes each, with room
MAX_DETAIL = 200             # characters of a verdict's one line kept
# where a verdict came from: the before-submit preflight, the job's own in-job preflight (a node
# it dropped), doctor's verdict on a failed job, the supervisor's recovery inside the allocation
# (a node an attempt dropped); one more source is one more name here and one reader in
# clusterkit.history.sources
SOURCES = ("preflight", "in-job", "doctor", "recovery")
_WHAT = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z")


class HistoryError(Exception):
    """The history file cannot be read or written (the message is one line, naming the file)."""


@dataclass(frozen=True)
class Event:
    """One failure of one node, as one source judged it."""

    node: str
    at: str                  # ISO-8601 UTC, ``...Z`` (sorts as text)
    source: str              # one of SOURCES
    what: str                # the check (gpu.xid), doctor's category (gpu-hardware) or a verdict (slow)
    hardware: bool           # counts toward keeping the node out of new jobs
    job: str | None = None   # the job it happened in (``SITE:ID`` is the record's; here the id)
    detail: str = ""         # the verdict's one line, printable, bounded

    @property
    def key(self) -> tuple[str, str, str, str | None]:
        """Two events with one key are one failure seen twice (a second ``doctor`` on one job)."""
        return (self.node, self.source, self.what, self.job)


def now_utc() -> str:
    """The current time as the history writes it."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """An event's time (validated by :func:`check_event` before it gets here)."""
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if "." in text else "%Y-%m-%dT%H:%M:%SZ"
    return datetime.strptime(text, fmt).replace(tzinfo=timezone.utc)


def check_event(raw: Any) -> Event | str:
    """``raw`` (one entry of a file) as an :class:`Event`, or what is wrong with it."""
    if not isinstance(raw, dict):
        return "an entry that is not an object"
    fields = {"node", "at", "source", "what", "hardware", "job", "detail"}
    extra = set(raw) - fields
    if extra:
        return f"unknown field {printable(sorted(extra)[0])[:40]!r}"
    node, at, source, what = raw.get("node"), raw.get("at"), raw.get("source"), raw.get("what")
    hardware, job, detail = raw.get("hardware"), raw.get("job"), raw.get("detail", "")
    if not isinstance(node, str) or not is_host(node):
        return f"node {printable(str(node))[:40]!r} is not a host name"
    if not isinstance(at, str) or not _TIME.fullmatch(at):
        return f"time {printable(str(at))[:40]!r} is not YYYY-MM-DDTHH:MM:SS[.ffffff]Z"
    try:
        parse_time(at)
    except ValueError:
        return f"time {at!r} is no date"
    if source not in SOURCES:
        return f"source {printable(str(source))[:40]!r} is not one of {', '.join(SOURCES)}"
    if not isinstance(what, str) or not _WHAT.fullmatch(what):
        return f"verdict {printable(str(what))[:40]!r} is not a check or category name"
    if not isinstance(hardware, bool):
        return "hardware is not true or false"
    if job is not None and (not isinstance(job, str) or not is_job_id(job)):
        return f"job {printable(str(job))[:40]!r} is not a job id"
    if not isinstance(detail, str):
        return "detail is not text"
    return Event(node, at, source, what, hardware, job, printable(detail)[:MAX_DETAIL])



@dataclass
class Loaded:
    """What a history file held: its valid events, and what was wrong with the rest."""

    events: list[Event] = field(default_factory=list)
    skipped: int = 0             # entries that were not events
    first_problem: str = ""      # the first of them, worded
    warning: str = ""            # the whole file was unusable (one line), or empty
    where: str = "node history"  # how the lines name the file

    def warnings(self) -> list[str]:
        """One line each: the file ignored, or entries left out."""
        if self.warning:
            return [self.warning]
        if self.skipped:
            return [f"{self.where}: {self.skipped} entr{'y' if self.skipped == 1 else 'ies'} left out "
                    f"({self.first_problem})"]
        return []


def state_dir() -> Path:
    """clusterkit's state directory (the job records' parent)."""
    state = os.environ.get("CLUSTERKIT_STATE_DIR")
    if state:
        return Path(state).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg).expanduser() / "clusterkit"


def history_path(site: str, root: Path | None = None) -> Path:
    """The history file of ``site`` (a site name: letters, digits, ``.``, ``_``, ``-``)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", site)[:100] or "_"
    return (root or state_dir() / "nodes") / f"{safe}.json"


def load(path: Path, owner_uid: int | None = None) -> Loaded:
    """The events in ``path``; never raises for what the file holds (see the module docstring).
    The file must be owned by ``owner_uid`` (default: the user running clusterkit)."""
    where = f"node history {path}"
    try:
        data, cut = read_capped(path, MAX_BYTES, follow_symlinks=False)
    except FileNotFoundError:
        return Loaded()
    except NotRegular:
        return Loaded(warning=f"{where}: not a regular file; ignored")
    except OSError as exc:
        return Loaded(warning=f"{where}: cannot read ({exc.strerror or exc}); ignored")
    if cut:
        return Loaded(warning=f"{where}: larger than {MAX_BYTES >> 20} MiB; ignored")
    try:   # the history is the user's own: one another user wrote could steer their jobs
        owner = os.lstat(path).st_uid
    except OSError:
        return Loaded()
    if owner != (os.geteuid() if owner_uid is None else owner_uid):
        return Loaded(warning=f"{where}: owned by another user (uid {owner}); ignored")
    try:
        doc = load_json(data.decode("utf-8", errors="replace"), unique_keys=True)
    except ValueError as exc:   # load_json's only exception: NaN, too deep, a key twice, not JSON
        return Loaded(warning=f"{where}: not JSON ({printable(str(exc))[:80]}); ignored")
    if not isinstance(doc, dict) or doc.get("version") != HISTORY_VERSION or not isinstance(doc.get("events"), list):
        return Loaded(warning=f"{where}: not a clusterkit node history (version {HISTORY_VERSION}); ignored")
    out = Loaded(where=where)
    for raw in doc["events"][: MAX_EVENTS * 2]:
        got = check_event(raw)
        if isinstance(got, Event):
            out.events.append(got)
        else:
            out.skipped += 1
            out.first_problem = out.first_problem or got
    extra = len(doc["events"]) - MAX_EVENTS * 2
    if extra > 0:
        out.skipped += extra
        out.first_problem = out.first_problem or f"more than {MAX_EVENTS * 2} entries"
    out.events = bounded(out.events)
    return out


def bounded(events: Iterable[Event]) -> list[Event]:
    """``events`` without repeats (the first seen of a key wins), oldest first, the newest
    :data:`MAX_EVENTS` of them."""
    seen: dict[tuple[str, str, str, str | None], Event] = {}
    for e in events:
        seen.setdefault(e.key, e)
    return sorted(seen.values(), key=lambda e: (e.at, e.node))[-MAX_EVENTS:]


def dump(events: list[Event]) -> bytes:
    """The file's text for ``events``."""
    doc = {"version": HISTORY_VERSION, "events": [asdict(e) for e in events]}
    return (json.dumps(doc, indent=1) + "\n").encode()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    # a lock of the file's own: in a shared directory another user's lock file is not ours to open
    lock = path.with_name(f".{path.name}.lock")
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(lock, flags, 0o600)
    except OSError as exc:
        raise HistoryError(f"node history {path.parent}: cannot lock ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def add(path: Path, new: Iterable[Event], mode: int = 0o600) -> Loaded:
    """Add ``new`` to the history in ``path`` (made 0700 if missing), under the directory's lock;
    returns what was there before.  A file that was unusable is replaced by one holding ``new``.
    Raises :class:`HistoryError` (one line) when the directory cannot be made or written."""
    # what a source read from a job's files is checked as strictly as the file itself
    wanted = [e for e in (check_event(asdict(e)) for e in new) if isinstance(e, Event)]
    if not wanted:
        return load(path)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise HistoryError(f"node history {path.parent}: cannot create ({exc.strerror or exc})") from None
    if not is_real_dir(path.parent):
        raise HistoryError(f"node history {path.parent}: not a directory (or a symbolic link)")
    with _locked(path):
        before = load(path)
        events = bounded([*before.events, *wanted])
        if not wanted or (events == before.events and not before.warning and not before.skipped):
            return before
        try:
            write_atomic(path, dump(events), mode=mode)
        except OSError as exc:
            reason = exc.strerror or os.strerror(exc.errno or errno.EIO)
            raise HistoryError(f"node history {path}: cannot write ({reason})") from None
    return before
