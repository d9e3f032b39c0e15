"""On a stall, the ranks' stack dumps: asked for, waited on, read (docs/architecture.md §3,
"Watching a run"; the rank's side is :mod:`clusterkit.stackdump`).

The supervisor appends a mark to each rank's stack file, then sends :data:`clusterkit.stackdump.SIGNAL`
to the ranks: with a launch step, ``scancel --signal=<n> JOBID`` (Slurm delivers it to every
process of the job's steps on every node, not to the batch script); with the launcher on the batch
host, to the launcher's every descendant.  It waits until each rank's file grew and stood still, at
most :data:`DUMP_WAIT_S`; a rank that wrote nothing (stopped) is named as such.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Collection
from pathlib import Path

from clusterkit import stackdump

DUMP_WAIT_S = 5.0   # how long a stall waits for the ranks' dumps (each takes milliseconds)
Send = Callable[[], "str | None"]   # sends the signal; what went wrong, or None
Client = Callable[..., "subprocess.CompletedProcess[str]"]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc; none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                raw = fh.read(4096).decode("ascii", errors="replace")
            ppid = int(raw.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < 100_000:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def sender(mode: str, job_id: str, client: Client, proc: subprocess.Popen[bytes] | None) -> Send:
    """How the signal reaches the ranks: through Slurm for a launch step, else down the launcher's tree."""
    def by_slurm() -> str | None:
        answer = client(["scancel", f"--signal={int(stackdump.SIGNAL)}", job_id])
        return None if answer.returncode == 0 else f"scancel: {(answer.stderr or '').strip()[:200] or 'failed'}"

    def by_tree() -> str | None:
        if proc is None or proc.poll() is not None:
            return "the launcher is gone"
        for pid in descendants(proc.pid):
            try:
                os.kill(pid, stackdump.SIGNAL)
            except OSError:
                continue
        return None

    return by_slurm if mode == "step" else by_tree


class Dumps:
    """One stall's dumps of the ranks in ``logs``."""

    def __init__(self, logs: Path, job_id: str, send: Send, clock: Callable[[], float] = time.monotonic) -> None:
        self.logs, self.job_id, self.send, self.clock = logs, job_id, send, clock
        self.sizes: dict[int, tuple[Path, int]] = {}
        self.last: dict[int, int] = {}
        self.asked_at: float | None = None
        self.error: str | None = None

    def ask(self, ranks: Collection[int]) -> int:
        """Mark and signal; how many ranks' files were marked (only those of ``ranks`` when given)."""
        self.asked_at = self.clock()
        for rank, path in stackdump.files(self.logs, self.job_id):
            if (not ranks or rank in ranks) and stackdump.mark(path):
                self.sizes[rank] = (path, _size(path))
        if self.sizes:
            self.error = self.send()
        return len(self.sizes)

    def done(self) -> bool:
        """Every marked file grew and stood still since the last look, or the wait is over."""
        if self.asked_at is None or not self.sizes or self.error or self.clock() - self.asked_at >= DUMP_WAIT_S:
            return True
        now = {rank: _size(path) for rank, (path, _) in self.sizes.items()}
        grown = all(now[r] > size for r, (_, size) in self.sizes.items())
        still = now == self.last
        self.last = now
        return grown and still

    def read(self) -> list[stackdump.Dump]:
        out = []
        for rank, (path, _) in sorted(self.sizes.items()):
            got = stackdump.read(path, rank)
            if got is not None:
                out.append(got)
        return out


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def send_signal_name() -> str:
    return signal.Signals(stackdump.SIGNAL).name
