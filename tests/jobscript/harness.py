"""Run a rendered job script as Slurm would, with real signals and real child processes.

The batch shell is ``bash job.sbatch`` in its own process group; ``usr2()`` is Slurm's
``--signal=B:USR2`` (the batch shell only), ``slurm_term()`` the TERM Slurm sends every process of
the job (cancel, the end of a preemption's grace time, the time limit), ``preempt_steps()`` the
TERM a preemption sends the job steps alone.  The ranks are ``rank_standin.sh``; ``scontrol``,
``scancel``, ``srun``, ``module`` and the in-job ``clusterkit`` are the stand-ins in
``standins/``, each recording its argv under the job's work directory.  Every wait is for a
marker file or a log line, bounded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from clusterkit import jobfiles

HERE = Path(__file__).parent
STANDINS = HERE / "standins"
RANK = HERE / "rank_standin.sh"
JOB_ID = "4321"
#: the bound on a wait for something the job does: only a job that never does it takes this long.
#: Not a guess of how long it takes: a machine busy with other work (two test workers, a CPU
#: burner) has taken over 30 s to start three stand-in ranks; a wait on the ranks or a marker also
#: fails at once when the batch shell has ended without them.
WAIT_S = 300.0


def until(what: str, check: Callable[[], bool], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


class Job:
    """One run of a rendered job script (``run_dir/job.sbatch``) with the stand-ins on PATH."""

    def __init__(self, run_dir: Path, work: Path, nodes: int = 2, restarts: int = 0, **env: str) -> None:
        self.run_dir, self.work, self.nodes = run_dir, work, nodes
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "ranks").mkdir(exist_ok=True)
        self.env = {**os.environ, "PATH": f"{STANDINS}:{os.environ['PATH']}", "JS_DIR": str(work),
                    "JS_PYTHON": sys.executable,
                    "SLURM_JOB_ID": JOB_ID, "SLURM_JOB_NODELIST": f"node[1-{nodes}]", "SLURM_NNODES": str(nodes),
                    "SLURM_RESTART_COUNT": str(restarts), **env}
        self.stderr_path = work / "batch.err"
        self.proc: subprocess.Popen[bytes] | None = None

    # ---- running
    def start(self) -> Job:
        with self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(["bash", str(self.run_dir / "job.sbatch")], cwd=self.work, env=self.env,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                         start_new_session=True)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the job was not started"
        return self.proc.pid

    def wait(self, timeout: float = WAIT_S) -> int:
        """The batch shell's end: its exit status, or -N when signal N ended it."""
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def run_through(self, rc: int) -> Job:
        """Start, let the ranks finish, and check that the job script ends with ``rc``; the job is
        killed whatever happens, so a failure leaves nothing running."""
        self.start()
        try:
            self.await_ranks()
            self.touch("finish")
            assert self.wait() == rc, self.log()
        finally:
            self.kill()
        return self

    def kill(self) -> None:
        """Remove whatever is left of the job (Slurm's final SIGKILL to the job's processes)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.proc.wait(timeout=WAIT_S)

    # ---- Slurm's signals
    def usr2(self) -> None:
        os.kill(self.pid, signal.SIGUSR2)

    def slurm_term(self) -> None:
        os.killpg(self.pid, signal.SIGTERM)

    def term_shell(self) -> None:
        """TERM to the batch shell alone (a local job's cancel)."""
        os.kill(self.pid, signal.SIGTERM)

    def preempt_steps(self) -> None:
        for pid in self.rank_pids():
            os.kill(pid, signal.SIGTERM)

    # ---- what happened
    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def await_log(self, text: str, timeout: float = WAIT_S) -> None:
        """Wait for a line of the batch shell's stderr; fails at once if the shell ended without it."""
        def seen() -> bool:
            if text in self.log():
                return True
            if not self.alive():
                raise AssertionError(f"the batch shell ended (status {self.proc and self.proc.returncode}) "
                                     f"before logging {text!r}:\n{self.log()}")
            return False
        until(f"{text!r} in the batch log", seen, timeout)

    def group(self) -> list[int]:
        """Processes still in the job's process group (the batch shell started it)."""
        out = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.pid and fields[0] != "Z":
                out.append(int(stat.parent.name))
        return out

    def rank_pids(self) -> list[int]:
        return [int(f.read_text()) for f in sorted((self.work / "ranks").glob("*.pid"))]

    def _while_alive(self, what: str, done: Callable[[], bool]) -> None:
        def check() -> bool:
            if done():
                return True
            # nothing of the job left to do it: the batch shell and every process it started ended
            if not self.alive() and not self.group() and not done():
                raise AssertionError(f"the job ended (batch shell status {self.proc and self.proc.returncode}) "
                                     f"before {what}:\n{self.log()}")
            return False
        until(what, check)

    def await_ranks(self) -> None:
        self._while_alive(f"{self.nodes} ranks started", lambda: len(self.rank_pids()) == self.nodes)

    def await_marker(self, suffix: str) -> None:
        self._while_alive(f"every rank's .{suffix} marker",
                          lambda: len(list((self.work / "ranks").glob(f"*.{suffix}"))) == self.nodes)

    def markers(self, suffix: str) -> list[str]:
        return [f.read_text().strip() for f in sorted((self.work / "ranks").glob(f"*.{suffix}"))]

    def calls(self, tool: str) -> list[str]:
        f = self.work / f"{tool}.argv"
        return f.read_text().splitlines() if f.exists() else []

    def touch(self, name: str) -> None:
        (self.work / name).touch()

    def result(self) -> str | None:
        f = jobfiles.RESULT.path(self.run_dir, JOB_ID)
        return f.read_text() if f.exists() else None

    def reason(self) -> str | None:
        f = jobfiles.REASON.path(self.run_dir, JOB_ID)
        return f.read_text() if f.exists() else None
