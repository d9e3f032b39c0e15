"""The Slurm test cluster: started once per test session by ``testbed.sh``, stopped at the end.

Every test in this directory is marked ``slurm`` and skipped, with the reason, where Slurm
cannot run (not root, Slurm/munge binaries missing).  Each session picks free TCP ports and a
random first job id, so two sessions on one machine neither collide on slurmctld's port nor
on rendezvous ports (those derive from job ids, and all fake nodes share 127.0.0.1).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import CLI, CLIResult, Wrap

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TESTBED = HERE / "testbed.sh"
NODES = 4
NEEDED = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "srun", "unshare")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slurm)


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "Slurm testbed needs root (SlurmUser=root, per-node UTS namespaces)"
    missing = [b for b in NEEDED if shutil.which(b) is None]
    if missing:
        return f"Slurm testbed needs {', '.join(missing)} (apt-get install slurmctld slurmd slurm-client munge)"
    return None


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port_block(count: int) -> int:
    """A base port with ``count`` consecutive free ports (slurmctld + one per slurmd)."""
    rng = random.Random()
    for _ in range(200):
        # below 20000: job scripts derive rendezvous ports from job ids in 20000-31999
        base = rng.randrange(10000, 19000)
        if all(_port_free(base + i) for i in range(count)):
            return base
    raise RuntimeError("no block of free TCP ports for the Slurm testbed")


@dataclass
class Testbed:
    """A running Slurm test cluster and the environment its clients need."""

    __test__ = False  # not a test class, despite the name

    lab: Path
    slurm_conf: Path
    sacct_dir: Path
    nodes: list[str] = field(default_factory=lambda: [f"node{i}" for i in range(1, NODES + 1)])

    def env(self, *, with_sacct: bool = False, **extra: str) -> dict[str, str]:
        """os.environ plus SLURM_CONF; ``with_sacct`` puts the sacct stand-in first on PATH.

        Without it, ``sacct`` is Debian's real one, which fails ("accounting storage is
        disabled") exactly like a site without slurmdbd.
        """
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.slurm_conf)
        # the CLI run by tests must be this checkout's python and its clusterkit
        path = [str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")]
        if with_sacct:
            path.insert(0, str(self.sacct_dir))
        env["PATH"] = os.pathsep.join(path)
        env.update(extra)
        return env

    def stop_controller(self) -> None:
        """Stop slurmctld only (slurmd and munge keep running), as when the controller dies."""
        pid = int((self.lab / "run" / "slurmctld.pid").read_text().strip())
        os.kill(pid, 15)
        deadline = time.monotonic() + 15
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)

    def start_controller(self) -> None:
        """Start slurmctld again (it recovers its state) and wait until every node is back."""
        env = self.env(SLURMLAB_DIR=str(self.lab))  # the marker testbed.sh --stop looks for
        subprocess.run(["slurmctld"], env=env, check=True, timeout=30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = self.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%T", check=False, timeout=30).stdout.split()
            if len(states) == NODES and all(s in ("idle", "allocated", "mixed", "completing") for s in states):
                return
            time.sleep(0.3)
        raise RuntimeError(f"testbed nodes did not come back after restarting slurmctld: {states}")

    def wait_idle(self, timeout: float = 60) -> None:
        """Wait until no job is left and every node is idle (earlier tests' jobs may linger).

        `-p debug`: sinfo -N lists a node once per partition, and every node is also in `high`.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = self.run("squeue", "-h", "-o", "%i %T", check=False).stdout.split("\n")
            states = self.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%T", check=False).stdout.split()
            if not any(j.strip() for j in jobs) and states == ["idle"] * NODES:
                return
            time.sleep(0.3)
        raise AssertionError(f"testbed not idle after {timeout}s: jobs {jobs}, node states {states}")

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command (scontrol, squeue, ...) against the testbed."""
        return subprocess.run(list(argv), env=self.env(), capture_output=True, text=True,
                              check=check, timeout=timeout)

    def resume(self, node: str) -> None:
        """Bring a node set DOWN by a test back.  With ReturnToService=2 slurmctld may already
        have returned it on its own (a DOWN node that answers a ping registers again); then
        Slurm refuses RESUME with "Invalid node state specified", and the node is up anyway."""
        proc = self.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        if proc.returncode != 0:
            state = self.run("sinfo", "-h", "-N", "-n", node, "-o", "%T", check=False).stdout.split()
            assert "Invalid node state" in proc.stderr and state and not any(
                s.startswith(("down", "drain")) for s in state), (proc.stderr, state)


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    """Start munge + slurmctld + 4 slurmd (gpu:8 each) for the session; stop them after."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    # munged insists that every directory above its socket is world-executable, which
    # pytest's own temporary directories (mode 700) are not: use a directory of our own.
    lab = Path(tempfile.mkdtemp(prefix="clusterkit-slurmlab-"))
    lab.chmod(0o755)
    env = dict(os.environ)
    env.update(
        SLURMLAB_DIR=str(lab),
        SLURMLAB_NODES=str(NODES),
        SLURMLAB_PORT=str(_free_port_block(NODES + 1)),
        SLURMLAB_FIRST_JOB_ID=str(random.randrange(1000, 60000) * 1000),
    )
    env.pop("SLURM_CONF", None)
    proc = subprocess.run(["bash", str(TESTBED)], env=env, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        pytest.fail(f"Slurm testbed did not start (rc={proc.returncode}):\n{proc.stderr[-3000:]}")
    bed = Testbed(lab=lab, slurm_conf=lab / "etc" / "slurm.conf", sacct_dir=lab / "bin")
    try:
        yield bed
    finally:
        subprocess.run(["bash", str(TESTBED), "--stop"], env=env, capture_output=True, text=True, timeout=120)
        if os.environ.get("CLUSTERKIT_KEEP_TESTBED") != "1":  # keep logs for debugging on request
            shutil.rmtree(lab, ignore_errors=True)


@dataclass
class CK:
    """``ck`` against the testbed, as a user runs it: a process with SLURM_CONF, the checkout's
    python first on PATH, and job records of its own."""

    bed: Testbed
    state_dir: Path
    runs: Path
    with_sacct: bool = False
    ck: CLI = field(default_factory=CLI)  # the test's ck; module-wide fixtures get a process-only CLI()

    def env(self, **extra: str) -> dict[str, str]:
        return self.bed.env(with_sacct=self.with_sacct, CLUSTERKIT_STATE_DIR=str(self.state_dir), **extra)

    def __call__(self, *args: str, timeout: float = 240, env: dict[str, str] | None = None,
                 wrap: Wrap | None = None) -> CLIResult:
        return self.ck.proc(*args, cwd=REPO, env=env or self.env(), timeout=timeout, wrap=wrap)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return self.ck.popen(*args, cwd=REPO, env=self.env())

    def records(self) -> list[Path]:
        d = self.state_dir / "jobs"
        return sorted(d.glob("*.json")) if d.is_dir() else []

    def status(self, job: str) -> dict:
        proc = self("status", job, "--json", timeout=60)
        assert proc.code == 0, proc.err
        return json.loads(proc.out)

    def wait_for(self, job: str, predicate, timeout: float = 60, what: str = "state") -> dict:
        """Poll ``status JOB --json`` until ``predicate(status)`` holds."""
        deadline = time.monotonic() + timeout
        st: dict = {}
        while time.monotonic() < deadline:
            st = self.status(job)
            if predicate(st):
                return st
            time.sleep(0.5)
        raise AssertionError(f"job {job}: {what} not reached in {timeout}s; last status {st}")


@pytest.fixture
def cli(ck: CLI, testbed: Testbed, tmp_path: Path) -> CK:
    """``ck`` bound to the testbed, records under tmp_path/state, run dirs under tmp_path/runs."""
    # run directories must be readable by the job's processes, which run as root like us
    tmp_path.chmod(0o755)
    return CK(bed=testbed, state_dir=tmp_path / "state", runs=tmp_path / "runs", ck=ck)
