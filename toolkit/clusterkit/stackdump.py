"""Stack dumps of the ranks on demand: each rank's every Python thread, asked for by a signal.

The rank's side (:func:`register`, called by :func:`clusterkit.progress` on its first use in a
process): Python's ``faulthandler`` is registered for :data:`SIGNAL` (SIGWINCH) with a file of
the rank's own, ``<CK_PROGRESS_FILE>.stack.rank<R>`` in the run's logs, opened for appending.
faulthandler writes from the C signal handler, without the interpreter's lock, so a rank hung
holding it (a long C call) still answers; a stopped rank answers nothing.  SIGWINCH because its
default action is to do nothing: every other process of the step (the launcher, a shell, srun)
that gets it lets it pass, and neither Slurm (USR1/USR2/TERM/KILL, CONT/STOP for suspend) nor the
job's stop signal uses it; a batch job has no terminal that would send it.  A script that set its
own handler for it keeps it (none is registered then).  A child forked by the rank (a data loader
worker) has it unregistered, so its dumps never mix with the rank's.  Before each dump the file
gets a header line (at registration) naming the rank, its node, pid and training thread.

The asking side (the supervisor, ``clusterkit doctor``): :func:`mark` appends a line saying a
dump was asked for, so the dump after the last mark is the newest; :func:`read` takes the file's
last :data:`MAX_BYTES` (a regular file only, decoded leniently, control characters dropped) and
finds the training thread's frames; :func:`summary` words the ranks' dumps in one line.
docs/jobs.md, "When the run stops making progress".
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import re
import signal
import stat
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from clusterkit import jobfiles
from clusterkit.nofollow import read_regular

SIGNAL = signal.SIGWINCH
SUFFIX = jobfiles.STACK + jobfiles.RANK
MAX_BYTES = 256 << 10
MAX_FRAMES = 200
_state: dict[str, object] = {"pid": 0, "file": None}
_HEAD = re.compile(r"# clusterkit stack dumps: rank=(\d{1,7}) host=([A-Za-z0-9._-]{1,64}) pid=(\d{1,10}) "
                   r"thread=0x([0-9a-f]{1,16})")
_MARK = "# clusterkit: stack dump asked at "
_THREAD = re.compile(r"(?:Current thread|Thread) 0x([0-9a-f]{1,16}) \(most recent call first\):")
_FRAME = re.compile(r'  File "([^"\n]{1,400})", line (\d{1,9}) in ([^\s]{1,200})')
# a torch.distributed frame (a full path, or py-spy's short one), or a native frame of c10d or gloo
_COLLECTIVE = re.compile(r"(?:^|[/\\])torch[/\\]distributed[/\\]| in (?:c10d|gloo)::")
_NAME = jobfiles.rank_files(jobfiles.STACK)


def _child() -> None:
    with contextlib.suppress(Exception):
        faulthandler.unregister(SIGNAL)


def register(progress_path: str, rank: int, host: str, thread: int) -> bool:
    """Once per process: dump every thread to ``<progress_path>.stack.rank<rank>`` on
    :data:`SIGNAL`; whether it is registered now.  Never raises."""
    if _state["pid"] == os.getpid():
        return _state["file"] is not None
    _state.update(pid=os.getpid(), file=None)
    try:
        if signal.getsignal(SIGNAL) not in (signal.SIG_DFL, None):
            return False   # the script's own handler stays
        fd = os.open(f"{progress_path}{SUFFIX}{rank}",
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
        fh: IO[str] = os.fdopen(fd, "a", encoding="ascii", errors="replace")
        fh.write(f"\n# clusterkit stack dumps: rank={rank} host={host} pid={os.getpid()} thread=0x{thread:016x}\n")
        fh.flush()
        faulthandler.register(SIGNAL, file=fh, all_threads=True, chain=False)
        _state["file"] = fh
        os.register_at_fork(after_in_child=_child)
        return True
    except Exception:   # never end a training run over its stack dumps
        return False


def files(logs: Path, job_id: str, name: re.Pattern[str] = _NAME) -> list[tuple[int, Path]]:
    """The job's stack dump files in ``logs`` (or the files ``name`` matches, with its ``job`` and
    ``rank`` groups: py-spy's), by rank (at most 4096)."""
    try:
        names = sorted(os.listdir(logs))
    except OSError:
        return []
    out = [(int(m.group("rank")), logs / n) for n in names if (m := name.match(n)) and m.group("job") == job_id]
    return sorted(out)[:4096]


def mark(path: Path, now: float | None = None) -> bool:
    """Append the line saying a dump is asked for now (to an existing regular file only)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        os.write(fd, f"{_MARK}{time.time() if now is None else now:.3f}\n".encode())
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Dump:
    """The newest dump of one rank: its training thread's frames, innermost first."""

    rank: int
    host: str
    frames: tuple[str, ...]     # "file line N in function", innermost first; empty: no dump since the mark
    asked: float | None = None  # when the dump was asked for (unix seconds)

    @property
    def collective(self) -> bool:
        return any(_COLLECTIVE.search(f) for f in self.frames)

    @property
    def top(self) -> str:
        """The innermost frame, the file's base name: ``train.py line 42 in main``."""
        if not self.frames:
            return "no dump (stopped, or not answering)"
        return os.path.basename(self.frames[0])

    def to_dict(self) -> dict[str, object]:
        return {"rank": self.rank, "node": self.host, "asked": self.asked, "frame": self.top if self.frames else None,
                "in_collective": self.collective if self.frames else None, "frames": list(self.frames[:20])}


def _tail(path: Path) -> str | None:
    data = read_regular(path, MAX_BYTES, tail=True)
    if data is None:
        return None
    text = data.decode("ascii", errors="replace")
    return "".join(c for c in text if c == "\n" or c.isprintable())


def parse(text: str, rank: int) -> Dump | None:
    """The newest dump asked for in a stack file's text: after the last mark that follows a
    header for ``rank`` (a later process's header with no mark yet does not hide it); None when
    no dump was ever asked for."""
    lines = text.splitlines()
    head, mark, current = None, None, None
    for i, ln in enumerate(lines):
        if (m := _HEAD.fullmatch(ln.strip())) is not None:
            current = m if int(m.group(1)) == rank else None
        elif ln.startswith(_MARK) and current is not None:
            head, mark = current, i
    if head is None or mark is None:
        return None
    threads: dict[int, list[str]] = {}
    frames: list[str] | None = None
    for ln in lines[mark + 1:]:
        if _HEAD.fullmatch(ln.strip()) or ln.startswith(_MARK):
            break
        if (t := _THREAD.fullmatch(ln.strip())) is not None:
            frames = threads.setdefault(int(t.group(1), 16), [])
            frames.clear()
        elif frames is not None and (f := _FRAME.fullmatch(ln.rstrip())) is not None and len(frames) < MAX_FRAMES:
            frames.append(f"{f.group(1)} line {f.group(2)} in {f.group(3)}")
    when = lines[mark][len(_MARK):].strip()
    asked = float(when) if re.fullmatch(r"\d{1,12}(?:\.\d{1,9})?", when) else None
    training = int(head.group(4), 16)
    got = threads.get(training) or (next(iter(threads.values())) if len(threads) == 1 else [])
    return Dump(rank, head.group(2), tuple(got), asked)


def read(path: Path, rank: int) -> Dump | None:
    text = _tail(path)
    return None if text is None else parse(text, rank)


def owner(path: Path, rank: int) -> tuple[str, int, int] | None:
    """The newest process of ``rank`` that registered in its stack file: (node, pid, thread)."""
    text = _tail(path) or ""
    heads = [m for ln in text.splitlines() if (m := _HEAD.fullmatch(ln.strip())) and int(m.group(1)) == rank]
    return (heads[-1].group(2), int(heads[-1].group(3)), int(heads[-1].group(4), 16)) if heads else None


def behind(dumps: Sequence[Dump]) -> list[Dump]:
    """The ranks behind, from their dumps: those with none while others answered (stopped, or cut
    off), else those outside any collective while the others wait in one, else the fewer than half
    whose innermost frame differs from where more than half are; none when it cannot be told."""
    if len(dumps) < 2:
        return []
    silent = [d for d in dumps if not d.frames]
    if silent and len(silent) < len(dumps):
        return silent
    out = [d for d in dumps if not d.collective]
    if out and len(out) < len(dumps):
        return out
    spot, n = Counter(_frame(d) for d in dumps).most_common(1)[0]
    return [d for d in dumps if _frame(d) != spot] if n * 2 > len(dumps) else []


def _frame(d: Dump) -> str:
    """The innermost frame without its line number (ranks at one call of one function agree)."""
    return re.sub(r" line \d+ in ", " in ", d.top)


def summary(dumps: Sequence[Dump], limit: int = 6) -> str:
    """The dumps in one line, ranks grouped by where they are: the ranks behind first."""
    if not dumps:
        return "none"
    groups: dict[str, list[Dump]] = {}
    late = {d.rank for d in behind(dumps)}
    for d in sorted(dumps, key=lambda d: (d.rank not in late, d.rank)):
        groups.setdefault(d.top + (" (a collective)" if d.collective else ""), []).append(d)
    parts = []
    for where, ds in list(groups.items())[:limit]:
        who = ("rank " if len(ds) == 1 else "ranks ") + ",".join(str(d.rank) for d in ds[:8])
        hosts = ", ".join(sorted({d.host for d in ds})[:4])
        parts.append(f"{who} on {hosts}: {where}")
    return "; ".join(parts) + ("; ..." if len(groups) > limit else "")
