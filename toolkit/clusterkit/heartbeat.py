"""The training script's progress, in one small file: ``clusterkit.progress(step)``.

The job exports ``CK_PROGRESS_FILE`` (``<run dir>/logs/<job id>.progress``).  The protocol, for
any language: rank 0 writes one line, ``step=<N> time=<unix seconds> phase=train|save``, to a
new file beside it and renames it over ``CK_PROGRESS_FILE`` (so a reader never sees half a
line).  ``phase=save`` says a checkpoint is being written: a long save is not a stall.
``clusterkit status JOB`` shows the newest line.  The first line a process writes and each
change of phase (a save starts, training goes on after it) are also appended to
``<CK_PROGRESS_FILE>.log`` (up to ``MAX_LOG_BYTES``): the marks ``status --run`` reads a run's
start-up, checkpoints and lost time from (docs/jobs.md, "What a run cost"), and the supervisor's
watch the step an attempt began at (:func:`first_mark`).

Every rank (rank 0 too) also keeps a file of its own, ``<CK_PROGRESS_FILE>.rank<R>``, one line
``step=<N> time=<t> phase=<p> rank=<R> host=<node> step_s=<s|-> work_s=<s|-> beat=<t>``:
``step_s`` is the median wall time per step over the rank's last :data:`WINDOW` steps,
``work_s`` the median of what the script passed as ``work_s`` (the time of the rank's own
work before its gradient sync: in lockstep training every rank's wall step time is the
slowest's, so only this tells a straggler), ``-`` before :data:`MIN_SAMPLES` of them.  A
daemon thread rewrites it every :data:`BEAT_S` seconds with a new ``beat``, so a rank that is
frozen (stopped, or hung holding the GIL) is told from ranks that wait in a collective; it
appends ``in=<file>:<function> coll=0|1``, where the training thread is (its innermost Python
frame, and whether a ``torch/distributed`` frame is on its stack: :func:`where`), a stack
sample without py-spy, so a rank stuck alive outside a collective is told from the waiting.  The
supervisor and ``status`` read these files (``clusterkit.supervise.ranks``).  Its first call in a
process also registers the rank's stack dumps on demand (:mod:`clusterkit.stackdump`).  A reader of the
format before them (rank 0's file alone) is unchanged.

:func:`progress` does that from Python.  It imports nothing heavy (the standard library, and
:mod:`clusterkit.jobfiles`'s names), is a no-op outside a clusterkit job and on every rank but 0,
writes at most every few seconds
(and at once when the phase changes), and never raises: progress reporting must not end a
training run.  :func:`read` is the reader's side, for text another user's job may have written
(bounded, lenient, validated).  docs/jobs.md, "Reporting progress".
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import re
import stat
import statistics
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass

from clusterkit import jobfiles, stackdump
from clusterkit.nofollow import read_regular

ENV = "CK_PROGRESS_FILE"
MIN_INTERVAL_S = 5.0     # between two writes of the same phase
MAX_BYTES = 512          # what a reader takes of the file
MAX_STEP = 10**15
MAX_LOG_BYTES = 256 << 10  # the progress log grows no further; a reader takes its last this many bytes
_last: dict[str, object] = {"time": 0.0, "phase": None, "path": None}
BEAT_S = 5.0            # how often each rank's own file is rewritten (its heartbeat)
WINDOW = 20             # the steps a rank's medians cover
MIN_SAMPLES = 5         # the steps before a median is written
RANK_SUFFIX = jobfiles.RANK
_COLLECTIVE = re.compile(r"[/\\]torch[/\\]distributed[/\\]")
_rank: dict[str, object] = {"lock": threading.Lock(), "pid": 0, "path": None, "line": None, "step": None,
                            "at": 0.0, "phase": None, "written": 0.0,
                            "steps": deque(maxlen=WINDOW), "works": deque(maxlen=WINDOW)}
_LINE = re.compile(r"step=(\d{1,16}) time=(\d{1,12}(?:\.\d{1,9})?) phase=(train|save)")


def _rank0() -> bool:
    """Rank 0 of the job (torchrun, DeepSpeed, Accelerate: RANK; srun tasks: SLURM_PROCID)."""
    rank = os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "0"
    return rank.strip() == "0"


def _rank_id() -> str | None:
    rank = (os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "0").strip()
    return rank if rank.isascii() and rank.isdigit() and len(rank) <= 7 else None


def _host() -> str:
    """The node's name as Slurm knows it (srun tasks: SLURMD_NODENAME), else the host name."""
    name = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:64] or "unknown"


def _median(values: deque[float]) -> str:
    return f"{statistics.median(values):.6f}" if len(values) >= MIN_SAMPLES else "-"


def where() -> tuple[str, int]:
    """Where the training thread is now: its innermost Python frame (``file:function``), and 1
    when a frame of ``torch/distributed`` is on its stack (it waits in a collective), else 0."""
    frame = sys._current_frames().get(int(_rank.get("thread") or 0))  # type: ignore[call-overload]
    while frame is not None and frame.f_code.co_filename == __file__:   # called from progress itself
        frame = frame.f_back
    if frame is None:
        return "-", 0
    inner = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}"
    coll = 0
    for _ in range(200):
        if frame is None:
            break
        if _COLLECTIVE.search(frame.f_code.co_filename):
            coll = 1
            break
        frame = frame.f_back
    return re.sub(r"[^A-Za-z0-9._:<>-]", "_", inner)[:80] or "-", coll


def _write_rank(now: float) -> None:
    """Rewrite this rank's own file (called under the lock); never raises."""
    r = _rank
    path = r["path"]
    if not isinstance(path, str) or r["step"] is None:
        return
    at, coll = where()
    line = (f"step={r['step']} time={float(r['at']):.3f} phase={r['phase']} rank={r['rank']} host={r['host']} "  # type: ignore[arg-type]
            f"step_s={_median(r['steps'])} work_s={_median(r['works'])} beat={now:.3f} "  # type: ignore[arg-type]
            f"in={at} coll={coll}\n")
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)
        r["written"] = now
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _final() -> None:
    """At the process's exit: its last step and medians, and on rank 0 its last step where the
    spaced writes left an older one (a run shorter than a beat is read too)."""
    with contextlib.suppress(Exception), _rank["lock"]:  # type: ignore[attr-defined]
        _write_rank(time.time())
        path, step, phase = _last.get("path"), _rank.get("step"), _rank.get("phase")
        if (_rank0() and isinstance(path, str) and path == os.environ.get(ENV) and isinstance(step, int)
                and isinstance(phase, str) and (step, phase) != (_last.get("step"), _last.get("phase"))):
            _write_main(path, step, phase, float(_rank.get("at") or time.time()))  # type: ignore[arg-type]


def _beat() -> None:
    """The heartbeat thread: this rank's file, rewritten every ``BEAT_S`` seconds."""
    while True:
        time.sleep(BEAT_S)
        try:
            with _rank["lock"]:  # type: ignore[attr-defined]
                _write_rank(time.time())
        except Exception:  # never end a training run over its progress report
            pass


def _report_rank(path: str, step: int, phase: str, now: float, work_s: float | None) -> None:
    """Note this rank's step (and its step times) and write its file when due."""
    rank = _rank_id()
    if rank is None:
        return
    r = _rank
    with r["lock"]:  # type: ignore[attr-defined]
        own = f"{path}{RANK_SUFFIX}{int(rank)}"
        if r["path"] != own:
            r.update(path=own, step=None, phase=None, written=0.0, rank=int(rank), host=_host())
            r["steps"].clear()  # type: ignore[attr-defined]
            r["works"].clear()  # type: ignore[attr-defined]
        last, at = r["step"], float(r["at"])  # type: ignore[arg-type]
        if phase == "train" and r["phase"] == "train" and isinstance(last, int) and step > last:
            r["steps"].append((now - at) / (step - last))  # type: ignore[attr-defined]
        if work_s is not None and math.isfinite(work_s) and 0 <= work_s < 1e6:
            r["works"].append(float(work_s))  # type: ignore[attr-defined]
        due = phase != r["phase"] or now - float(r["written"]) >= BEAT_S  # type: ignore[arg-type]
        r.update(step=step, at=now, phase=phase, thread=threading.get_ident())
        if due:
            _write_rank(now)
        if r["pid"] != os.getpid():   # one heartbeat thread per process (a fork has none)
            r["pid"] = os.getpid()
            threading.Thread(target=_beat, name="clusterkit-progress-beat", daemon=True).start()
            atexit.register(_final)
            stackdump.register(path, int(rank), str(r["host"]), threading.get_ident())


def progress(step: int, *, saving: bool = False, min_interval_s: float = MIN_INTERVAL_S,
             work_s: float | None = None) -> bool:
    """Report that training reached ``step`` (``saving=True``: a checkpoint save starts now;
    call again without it when the save is done).  ``work_s``: the seconds this rank's own work
    of the step took (before its gradient sync), which lets ``status`` name a straggler.  Every
    rank calls it; returns whether rank 0's line was written."""
    path = os.environ.get(ENV, "")
    if not path:
        return False
    try:
        step = int(step)
        work = None if work_s is None else float(work_s)
    except (TypeError, ValueError, OverflowError):
        return False
    if not 0 <= step <= MAX_STEP:
        return False
    with contextlib.suppress(Exception):   # never raises: the report must not end a training run
        _report_rank(path, step, "save" if saving else "train", time.time(), work)
    if not _rank0():
        return False
    now = time.time()
    phase = "save" if saving else "train"
    if (phase == _last["phase"] and path == _last["path"]
            and now - float(_last["time"]) < min_interval_s):  # type: ignore[arg-type]
        return False
    return _write_main(path, step, phase, now)


def _write_main(path: str, step: int, phase: str, now: float) -> bool:
    """Rank 0's line, written to a new file and renamed over ``path``."""
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
        _mark(path + jobfiles.MARKS, line)
    _last.update(time=now, phase=phase, path=path, step=step)
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
    data = read_regular(path, MAX_LOG_BYTES, tail=True)
    if not data:
        return []
    marks = [p for ln in data.decode("ascii", errors="replace").splitlines() if (p := _parse(ln)) is not None]
    return sorted(marks, key=lambda p: p.time)


def log_size(path: str | os.PathLike[str]) -> int:
    """The progress log's size now (0 without one, or not a regular file): marks written from now
    on are appended past it."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def first_mark(path: str | os.PathLike[str], start: int, at_most: int) -> int | None:
    """The step of the first mark appended to the progress log past byte ``start`` whose step is at
    most ``at_most`` (a process's first line is always marked: where it began), or None (none yet,
    or the log is full)."""
    data = read_regular(path, MAX_LOG_BYTES, start=start)
    for raw in (data or b"").decode("ascii", errors="replace").splitlines():
        mark = _parse(raw)
        if mark is not None and mark.step <= at_most:
            return mark.step
    return None


def read(path: str | os.PathLike[str]) -> Progress | None:
    """The line at ``path``, or None when there is none or it is not one: a regular file only
    (no link, FIFO or device is opened), the first ``MAX_BYTES`` bytes, strictly the format."""
    data = read_regular(path, MAX_BYTES)
    return None if data is None else _parse(data.decode("ascii", errors="replace"))
