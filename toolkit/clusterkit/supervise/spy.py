"""On a stall, py-spy's dumps and the flight recorder's, asked on every node of the ranks
(docs/architecture.md §3, "Watching a run"; the node's side is :mod:`clusterkit.supervise.spynode`).

The ranks' pids and nodes come from the headers of their stack files (:func:`clusterkit.stackdump.owner`).
With a launch step the node side runs as one bounded ``srun --overlap`` step, one task on each
node of the ranks; with the launcher on the batch host, there.  The wait is at most
:data:`SPY_WAIT_S`; what the nodes printed is logged (a line said once per job: py-spy missing,
ptrace refused), and the dumps are read back with :func:`clusterkit.pyspy.read_all`.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from pathlib import Path

from clusterkit import pyspy, slurmclient, stackdump

SPY_WAIT_S = 20.0       # srun's start on the nodes, then py-spy (8 s at most a rank)
MAX_LINES = 40
_said: set[str] = set()  # lines said once a job (this process is the job's supervisor)


def targets(logs: Path, job_id: str, ranks: Collection[int]) -> list[str]:
    """``RANK:PID:THREAD@NODE`` for each rank's newest process (only those of ``ranks`` when given)."""
    out = []
    for rank, path in stackdump.files(logs, job_id):
        got = stackdump.owner(path, rank) if not ranks or rank in ranks else None
        if got is not None:
            out.append(f"{rank}:{got[1]}:{got[2]:x}@{got[0]}")
    return out


class Spy:
    """One stall's py-spy and flight-recorder dumps."""

    def __init__(self, logs: Path, job_id: str, restart: int, mode: str,
                 clock: Callable[[], float] = time.monotonic, python: str = sys.executable) -> None:
        self.logs, self.job_id, self.restart, self.mode = logs, job_id, restart, mode
        self.clock, self.python = clock, python
        self.proc: subprocess.Popen[bytes] | None = None
        self.out: tempfile._TemporaryFileWrapper[bytes] | None = None
        self.started = 0.0
        self.asked = 0.0

    def argv(self, found: list[str]) -> list[str]:
        node = [self.python, "-m", "clusterkit.supervise.spynode", "--logs", str(self.logs), "--job", self.job_id,
                "--restart", str(self.restart), "--asked", f"{self.asked:.3f}"]
        if self.mode != "step":
            return [*node, "--all", *found]
        hosts = sorted({t.rsplit("@", 1)[1] for t in found})
        n = str(len(hosts))
        return ["srun", "--nodes", n, "--ntasks", n, "--ntasks-per-node", "1", "--nodelist", ",".join(hosts),
                "--overlap", "--kill-on-bad-exit=0", "--cpus-per-task", "1", "--job-name", "clusterkit-pyspy",
                *node, *found]

    def ask(self, ranks: Collection[int]) -> int:
        """Start the nodes' side for the ranks with a stack file; how many ranks it was asked for."""
        found = targets(self.logs, self.job_id, ranks)
        if not found:
            return 0
        self.asked, self.started = time.time(), self.clock()
        self.out = tempfile.NamedTemporaryFile(prefix="ck-pyspy-")  # noqa: SIM115 (closed in lines())
        try:
            self.proc = slurmclient.step(self.argv(found), self.out)
        except OSError as exc:
            self.out.write(f"py-spy's step could not start: {exc.strerror or exc}\n".encode())
            self.proc = None
        return len(found)

    def done(self) -> bool:
        """The nodes answered, or the wait is over (then the step is ended)."""
        if self.proc is None or self.proc.poll() is not None:
            return True
        if self.clock() - self.started < SPY_WAIT_S:
            return False
        self.stop()
        return True

    def stop(self) -> None:
        """End the nodes' side where it has not ended (TERM, KILL a second later); said in its output."""
        if self.proc is None or self.proc.poll() is not None:
            return
        slurmclient.stop(self.proc, grace_s=1.0)   # TERM to its session, KILL a second later
        if self.out is not None:
            self.out.write(f"py-spy's step had not ended after {self.clock() - self.started:.0f} s: ended\n".encode())

    def lines(self) -> list[str]:
        """What the nodes said, bounded and printable: what went wrong (a dump taken is in the dumps' summary);
        a line said before in this job left out."""
        if self.out is None:
            return []
        self.out.flush()
        self.out.seek(0)
        text = self.out.read(64 << 10).decode("utf-8", errors="replace")
        with contextlib.suppress(OSError):
            self.out.close()
        self.out = None
        got = []
        for ln in text.splitlines()[:MAX_LINES]:
            ln = "".join(c for c in ln if c.isprintable()).strip()[:300]
            key = re.sub(r"^rank \d+ on ", "", ln) if "not installed" in ln or "permission denied" in ln else None
            if ln and key not in _said and ": py-spy dumped pid " not in ln:   # the dumps' summary says those
                if key is not None:
                    _said.add(key)   # once a node, for the job
                got.append(ln)
        return got

    def read(self) -> list[stackdump.Dump]:
        return pyspy.read_all(self.logs, self.job_id, since=self.asked - 1.0) if self.asked else []
