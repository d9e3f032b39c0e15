"""The training script's progress, in one small file: ``clusterkit.progress(step)``.

The job exports ``CK_PROGRESS_FILE`` (``<run dir>/logs/<job id>.progress``).  The protocol, for
any language: rank 0 writes one line, ``step=<N> time=<unix seconds> phase=train|save``, to a
new file beside it and renames it over ``CK_PROGRESS_FILE`` (so a reader never sees half a
line).  ``phase=save`` says a checkpoint is being written: a long save is not a stall.
``clusterkit status JOB`` shows the newest line.  The first line a process writes and each
change of phase (a save starts, training goes on after it) are also appended to
``<CK_PROGRESS_FILE>.log`` (up to ``MAX_LOG_BYTES``): the marks ``status --run`` reads a run's
start-up, checkpoints and lost time from (docs/jobs.md, "What a run cost").

:func:`progress` does that from Python.  It imports nothing heavy (the standard library only),
is a no-op outside a clusterkit job and on every rank but 0, writes at most every few seconds
(and at once when the phase changes), and never raises: progress reporting must not end a
training run.  :func:`read` is the reader's side, for text another user's job may have written
(bounded, lenient, validated).  docs/jobs.md, "Reporting progress".
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import stat
import time
from dataclasses import dataclass

ENV = "CK_PROGRESS_FILE"
MIN_INTERVAL_S = 5.0     # between two writes of the same phase
MAX_BYTES = 512          # what a reader takes of the file
MAX_STEP = 10**15
MAX_LOG_BYTES = 256 << 10  # the progress log grows no further; a reader takes its last this many bytes
_last: dict[str, object] = {"time": 0.0, "phase": None, "path": None}
_LINE = re.compile(r"step=(\d{1,16}) time=(\d{1,12}(?:\.\d{1,9})?) phase=(train|save)")


def _rank0() -> bool:
    """Rank 0 of the job (torchrun, DeepSpeed, Accelerate: RANK; srun tasks: SLURM_PROCID)."""
    rank = os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "0"
    return rank.strip() == "0"


def progress(step: int, *, saving: bool = False, min_interval_s: float = MIN_INTERVAL_S) -> bool:
    """Report that training reached ``step`` (``saving=True``: a checkpoint save starts now;
    call again without it when the save is done).  Returns whether a line was written."""
    path = os.environ.get(ENV, "")
    if not path or not _rank0():
        return False
    try:
        step = int(step)
    except (TypeError, ValueError, OverflowError):
        return False
    if not 0 <= step <= MAX_STEP:
        return False
    now = time.time()
    phase = "save" if saving else "train"
    if (phase == _last["phase"] and path == _last["path"]
            and now - float(_last["time"]) < min_interval_s):  # type: ignore[arg-type]
        return False
    line = f"step={step} time={now:.3f} phase={phase}\n".encode()
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    if phase != _last["phase"] or path != _last["path"]:
        _mark(path + ".log", line)
    _last.update(time=now, phase=phase, path=path)
    return True


def _mark(log: str, line: bytes) -> None:
    """Append ``line`` to the progress log, never past ``MAX_LOG_BYTES``, never raising."""
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size + len(line) <= MAX_LOG_BYTES:
            os.write(fd, line)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Progress:
    """The newest progress line of a job."""

    step: int
    time: float       # when rank 0 wrote it (unix seconds)
    phase: str        # train | save

    def worded(self, now: float | None = None) -> str:
        ago = max(0.0, (time.time() if now is None else now) - self.time)
        when = f"{ago:.0f} s ago" if ago < 120 else f"{ago / 60:.0f} min ago"
        what = "saving a checkpoint at step" if self.phase == "save" else "step"
        return f"{what} {self.step}, {when} ({time.strftime('%H:%M:%S', time.localtime(self.time))})"


def _read_regular(path: str | os.PathLike[str], limit: int, tail: bool = False) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if tail and st.st_size > limit:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _parse(text: str) -> Progress | None:
    m = _LINE.fullmatch(text.strip())
    if m is None:
        return None
    step, when = int(m.group(1)), float(m.group(2))
    if step > MAX_STEP or not math.isfinite(when):
        return None
    return Progress(step=step, time=when, phase=m.group(3))


def read_log(path: str | os.PathLike[str]) -> list[Progress]:
    """The marks of a progress log (``<progress file>.log``), oldest first: a regular file only,
    its last ``MAX_LOG_BYTES`` bytes, each line strictly the format (any other line left out)."""
    data = _read_regular(path, MAX_LOG_BYTES, tail=True)
    if not data:
        return []
    marks = [p for ln in data.decode("ascii", errors="replace").splitlines() if (p := _parse(ln)) is not None]
    return sorted(marks, key=lambda p: p.time)


def read(path: str | os.PathLike[str]) -> Progress | None:
    """The line at ``path``, or None when there is none or it is not one: a regular file only
    (no link, FIFO or device is opened), the first ``MAX_BYTES`` bytes, strictly the format."""
    data = _read_regular(path, MAX_BYTES)
    return None if data is None else _parse(data.decode("ascii", errors="replace"))
