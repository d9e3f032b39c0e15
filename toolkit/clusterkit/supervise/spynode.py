"""On one node, on a stall: py-spy's dump of each of this node's ranks, and the flight recorder
asked for a dump through each rank's pipe (``python -m clusterkit.supervise.spynode``; the
supervisor runs it as an ``srun --overlap`` step on the job's nodes, or on the batch host:
:mod:`clusterkit.supervise.spy`; docs/architecture.md §3, "Watching a run").

Each target is ``RANK:PID:THREAD@NODE`` (from the rank's stack file header); a node takes those
naming itself (``SLURMD_NODENAME``, else its host name), or all with ``--all``.  py-spy runs as
``py-spy dump --pid PID --nonblocking --full-filenames`` (``--nonblocking``: the rank is not
paused, and a stopped rank is read all the same), every rank at once, at most :data:`SPY_S` each;
its output goes to ``<job>.progress.pyspy.rank<R>`` after a header line, at most
:data:`clusterkit.pyspy.MAX_BYTES`; a failed dump leaves no file.  Each rank's flight-recorder
pipe (``clusterkit.pyspy.FR_PIPE`` + ``<rank>.pipe``, made by torch's ProcessGroupNCCL where
``TORCH_NCCL_DEBUG_INFO_PIPE_FILE`` is set) gets one line, opened ``O_NONBLOCK``: no pipe or no
reader is said, never waited on.  It prints one line per finding (stdout) and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from clusterkit import pyspy
from clusterkit.tooltext import printable_lines

SPY_S = 8.0
_TARGET = re.compile(r"(\d{1,7}):(\d{1,10}):([0-9a-f]{1,16})@([A-Za-z0-9._-]{1,64})")


def _node() -> str:
    return os.environ.get("SLURMD_NODENAME") or os.uname().nodename


def find_pyspy() -> str | None:
    """py-spy on PATH, else beside this Python (a virtual environment's bin)."""
    here = Path(sys.executable).parent / "py-spy"
    return shutil.which("py-spy") or (str(here) if os.access(here, os.X_OK) else None)


def _ptrace_scope() -> str:
    try:
        return Path("/proc/sys/kernel/yama/ptrace_scope").read_text()[:4].strip() or "?"
    except OSError:
        return ""


def denied_words(scope: str) -> str:
    """Why py-spy may not read a rank, plainly."""
    why = f"kernel.yama.ptrace_scope is {scope}" if scope else "no ptrace permission"
    return (f"permission denied ({why}): py-spy needs ptrace permission over the rank "
            "(ptrace_scope 0, or CAP_SYS_PTRACE); the stack files stand")


def _first_line(data: bytes) -> str:
    text = printable_lines(data[:4096].decode("utf-8", errors="replace"))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[0] if lines else "no message")[:200]


def dump_ranks(targets: list[tuple[int, int, int, str]], logs: Path, job: str, asked: float, exe: str) -> list[str]:
    """py-spy's dump of every target, at once, each within :data:`SPY_S`; one line per outcome."""
    running: list[tuple[int, int, subprocess.Popen[bytes] | None, IO[bytes] | None, Path, str]] = []
    for rank, pid, thread, host in targets:
        out = pyspy.path(logs, job, rank)
        try:
            with contextlib.suppress(FileNotFoundError):
                out.unlink()
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            running.append((rank, pid, None, None, out, f"cannot write {out.name}: {exc.strerror or exc}"))
            continue
        os.write(fd, pyspy.head(rank, host, pid, thread, asked).encode())
        err = tempfile.TemporaryFile()  # noqa: SIM115 (closed once py-spy has ended, below)
        proc = subprocess.Popen([exe, "dump", "--pid", str(pid), "--nonblocking", "--full-filenames"],
                                stdin=subprocess.DEVNULL, stdout=fd, stderr=err)
        os.close(fd)
        running.append((rank, pid, proc, err, out, ""))
    said, end = [], time.monotonic() + SPY_S
    scope = None
    for rank, pid, child, errors, out, why in running:
        if child is None or errors is None:
            said.append(f"rank {rank} on {_node()}: {why}")
            continue
        try:
            rc: int | None = child.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            rc = None
        errors.seek(0)
        message = _first_line(errors.read(4096))
        errors.close()
        size = out.stat().st_size if out.exists() else 0
        if rc == 0 and size > 0:
            if size > pyspy.MAX_BYTES:
                os.truncate(out, pyspy.MAX_BYTES)
            said.append(f"rank {rank} on {_node()}: py-spy dumped pid {pid}")
            continue
        with contextlib.suppress(OSError):
            out.unlink()
        if rc is None:
            said.append(f"rank {rank} on {_node()}: py-spy gave no dump of pid {pid} within {SPY_S:.0f} s")
        elif re.search(r"permission denied|operation not permitted", message, re.IGNORECASE):
            scope = _ptrace_scope() if scope is None else scope
            said.append(f"rank {rank} on {_node()}: py-spy: {denied_words(scope)}")
        else:
            said.append(f"rank {rank} on {_node()}: py-spy could not read pid {pid} (status {rc}): {message}")
    return said


def poke_pipe(file: str) -> str:
    """Ask one rank's flight recorder for a dump: a line into its pipe, never waiting."""
    try:
        st = os.lstat(file)
    except OSError:
        return "no pipe"
    if not stat.S_ISFIFO(st.st_mode):
        return "not a pipe, left alone"
    try:
        fd = os.open(file, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return "no reader" if exc.errno == errno.ENXIO else f"cannot open: {exc.strerror or exc}"
    try:
        os.write(fd, b"dump\n")
        return "asked"
    except OSError as exc:
        return "a dump is pending" if exc.errno == errno.EAGAIN else f"cannot write: {exc.strerror or exc}"
    finally:
        os.close(fd)


def poke_pipes(ranks: list[int], job: str, restart: int) -> list[str]:
    """Each rank's flight-recorder pipe asked; one line for the node (nothing where no rank has one)."""
    by: dict[str, list[int]] = {}
    for rank in ranks:
        by.setdefault(poke_pipe(f"{pyspy.FR_PIPE.format(job=job, restart=restart)}{rank}.pipe"), []).append(rank)
    if set(by) <= {"no pipe"}:
        return []
    parts = [f"{what}: ranks {','.join(map(str, sorted(rs)[:16]))}" for what, rs in sorted(by.items())]
    return [f"flight recorder on {_node()}: " + "; ".join(parts)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m clusterkit.supervise.spynode")
    p.add_argument("--logs", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--restart", type=int, default=0)
    p.add_argument("--asked", type=float, required=True)
    p.add_argument("--all", action="store_true", help="every target, whatever its node")
    p.add_argument("targets", nargs="*")
    a = p.parse_args(argv)
    mine = []
    for t in a.targets[:4096]:
        m = _TARGET.fullmatch(t)
        if m and (a.all or m.group(4) == _node()):
            mine.append((int(m.group(1)), int(m.group(2)), int(m.group(3), 16), m.group(4)))
    if not mine:
        return 0
    lines = poke_pipes([t[0] for t in mine], a.job, a.restart)
    exe = find_pyspy()
    if exe is None:
        lines.append(f"py-spy is not installed on {_node()} (not on PATH, nor beside {sys.executable}): "
                     "its dumps are not taken there")
    else:
        lines += dump_ranks(mine, Path(a.logs), a.job, a.asked, exe)
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
