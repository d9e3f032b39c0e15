"""The Slurm testbed itself, as the tests' fixtures (``tests/slurm/conftest.py``) start and reach it:
``testbed.sh`` run with free ports and a random first job id, the :class:`Testbed` it leaves
(its nodes' network namespaces, its environment, its commands), and the supervisor's log of
daemons that died.
"""

from __future__ import annotations

import ctypes
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TESTBED = HERE / "testbed.sh"
NODES = 4
# SLURMLAB_SLURM=24.11: the testbed runs Slurm 24.11, built once by testbed.sh into a git-ignored
# cache (build/slurm-24.11, or SLURMLAB_SLURM_CACHE); its commands come first on this process's
# PATH, so every client a test runs (and srun on the login node) is that version's.  Unset or
# 22.05: the system's Slurm.  Tests where the two behave differently name the version.
SLURM_VERSION = os.environ.get("SLURMLAB_SLURM") or "22.05"
if SLURM_VERSION != "22.05":
    _prefix = Path(os.environ.get("SLURMLAB_SLURM_CACHE") or REPO / "build" / f"slurm-{SLURM_VERSION}") / "prefix"
    os.environ["PATH"] = os.pathsep.join([str(_prefix / "bin"), str(_prefix / "sbin"), os.environ.get("PATH", "")])
NEEDED = ("munged", "slurmctld", "slurmd", "slurmdbd", "sbatch", "squeue", "scontrol", "scancel", "srun", "sacct",
          "sacctmgr", "mariadbd", "mariadb-install-db", "unshare", "nsenter", "ip")


_SUPERVISED: list[Path] = []  # the supervise.log of every testbed started in this session


def _supervise_offsets() -> dict[Path, int]:
    return {p: (p.stat().st_size if p.exists() else 0) for p in _SUPERVISED}


def daemon_deaths(since: dict[Path, int]) -> list[str]:
    """The supervisor's lines about dead daemons written after the offsets ``since``."""
    out: list[str] = []
    for path in _SUPERVISED:
        try:
            with path.open("rb") as f:
                f.seek(since.get(path, 0))
                text = f.read(64 * 1024).decode("utf-8", "replace")
        except OSError:
            continue
        out += [f"{path.parent.parent.name}: {line}" for line in text.splitlines() if " died" in line]
    return out


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "Slurm testbed needs root (SlurmUser=root, per-node UTS namespaces)"
    missing = [b for b in NEEDED if shutil.which(b) is None]
    if missing:
        return (f"Slurm testbed needs {', '.join(missing)} "
                "(apt-get install slurmctld slurmd slurmdbd slurm-client munge mariadb-server iproute2)")
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
    """A base port with ``count`` consecutive free ports (the testbed's: slurmctld, slurmdbd)."""
    rng = random.Random()
    for _ in range(200):
        # below 20000: job scripts derive rendezvous ports from job ids in 20000-31999
        base = rng.randrange(10000, 19000)
        if all(_port_free(base + i) for i in range(count)):
            return base
    raise RuntimeError("no block of free TCP ports for the Slurm testbed")


def read_env_file(path: Path) -> dict[str, str]:
    """``testbed.env`` (lines of ``export NAME=value ...``) -> {NAME: value}."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        words = line.split()
        if words[:1] == ["export"]:
            out.update(w.split("=", 1) for w in words[1:] if "=" in w)
    return out


def _setns(fd: int) -> None:
    """setns(2) into a network namespace, for this thread only (os.setns is Python 3.12+)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@dataclass
class Testbed:
    """A running Slurm test cluster and the environment its clients need."""

    __test__ = False  # not a test class, despite the name

    lab: Path
    slurm_conf: Path
    exports: dict[str, str] = field(default_factory=dict)  # testbed.env
    nodes: list[str] = field(default_factory=lambda: [f"node{i}" for i in range(1, NODES + 1)])

    @property
    def ctl_netns(self) -> str:
        """The controller's network namespace: the login node, where srun/salloc must run."""
        return self.exports["SLURMLAB_NETNS_CTL"]

    def netns(self, node: str) -> str:
        return self.exports[f"SLURMLAB_NETNS_{node}"]

    def iface(self, node: str) -> str:
        return self.exports[f"SLURMLAB_IF_{node}"]

    def addr(self, node: str) -> str:
        return self.exports[f"SLURMLAB_ADDR_{node}"]

    def cgroup(self, node: str) -> Path | None:
        d = self.exports.get(f"SLURMLAB_CGROUP_{node}")
        return Path(d) if d else None

    def node_state(self, node: str) -> str:
        """``node``'s state as sinfo words it (``-p debug``: every node is in `high` too)."""
        return self.run("sinfo", "-h", "-N", "-n", node, "-p", "debug", "-o", "%T", check=False).stdout.strip()

    def steps_gone(self, node: str, job: str, timeout: float = 150) -> None:
        """Wait until no step of ``job`` is left on ``node`` (each live step has a slurmstepd socket
        ``<node>_<job>.<step>`` in the node's spool directory), then check that ending them did not
        drain the node.  A node cut off mid-run still runs its part of the job when its link comes
        back; slurmctld has it killed, and a step that outlives UnkillableStepTimeout (Slurm's
        default 60 s, this testbed's 180 s) drains the node ("Kill task failed"), after the test
        that left it has passed unless that test waits here."""
        spool = self.lab / "state" / "spool" / node
        deadline = time.monotonic() + timeout
        while left := sorted(p.name for p in spool.glob(f"{node}_{job}.*")):
            assert time.monotonic() < deadline, f"steps of job {job} still on {node} after {timeout}s: {left}"
            time.sleep(0.3)
        state = self.node_state(node)
        assert not state.startswith("drain"), f"{node} {state} after job {job}'s steps ended: {self.why_not_idle()}"

    def listen_on(self, node: str, port: int = 0) -> socket.socket:
        """A TCP socket listening on 127.0.0.1:``port`` (0: any free one) on ``node``: made by a
        thread that joins the node's network namespace for that (the socket stays there)."""
        made: list[socket.socket | BaseException] = []

        def make() -> None:
            try:
                fd = os.open(f"/run/netns/{self.netns(node)}", os.O_RDONLY)
                try:
                    _setns(fd)
                finally:
                    os.close(fd)
                s = socket.socket()
                s.bind(("127.0.0.1", port))
                s.listen()
                made.append(s)
            except BaseException as exc:  # handed to the caller
                made.append(exc)

        t = threading.Thread(target=make)
        t.start()
        t.join()
        if isinstance(made[0], BaseException):
            raise made[0]
        return made[0]

    def login_bin(self) -> Path:
        """A directory with ``srun`` and ``salloc`` that run the real ones on the login node.

        srun and salloc are called back by slurmd and slurmctld on the address they connect
        from, which must be one the nodes can reach: inside the controller's namespace (the
        login node), not on this machine's loopback.  Each is ``ip netns exec NS <real one>``.
        """
        d = self.lab / "login-bin"
        if not d.is_dir():
            tmp = self.lab / "login-bin.tmp"
            tmp.mkdir()
            for name in ("srun", "salloc"):
                real = shutil.which(name)
                assert real, name
                (tmp / name).write_text(f'#!/bin/sh\n# the real {name}, on the test cluster\'s login node\n'
                                        f'exec ip netns exec {self.ctl_netns} {real} "$@"\n')
                (tmp / name).chmod(0o755)
            tmp.rename(d)
        return d

    def no_accounting_conf(self) -> Path:
        """A client slurm.conf without accounting: the real sacct then fails as at a site with
        no slurmdbd ("Slurm accounting storage is disabled"); everything else is the testbed's."""
        path = self.lab / "etc" / "slurm-noacct.conf"
        if not path.exists():
            lines = [ln for ln in self.slurm_conf.read_text().splitlines()
                     if not ln.startswith("AccountingStorage")]
            tmp = path.with_suffix(".tmp")
            tmp.write_text("\n".join([*lines, "AccountingStorageType=accounting_storage/none", ""]))
            tmp.replace(path)
        return path

    def env(self, *, accounting: bool = True, login: bool = False, **extra: str) -> dict[str, str]:
        """os.environ plus SLURM_CONF (``accounting=False``: the conf of a site without slurmdbd);
        ``login``: srun and salloc run on the login node (:meth:`login_bin`)."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.slurm_conf if accounting else self.no_accounting_conf())
        # the CLI run by tests must be this checkout's python and its clusterkit
        path = [str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")]
        if login:
            path.insert(0, str(self.login_bin()))
        env["PATH"] = os.pathsep.join(path)
        env.update(extra)
        return env

    def stop_controller(self) -> None:
        """Stop slurmctld only (slurmd and munge keep running), as when the controller dies."""
        pid = int((self.lab / "run" / "slurmctld.pid").read_text().strip())
        (self.lab / "run" / "slurmctld.held").touch()  # the supervisor leaves it down (--ctld lifts that)
        os.kill(pid, 15)
        deadline = time.monotonic() + 15
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)

    def start_controller(self) -> None:
        """Start slurmctld again (it recovers its state) and wait until every node is back."""
        env = self.env(SLURMLAB_DIR=str(self.lab))
        subprocess.run(["bash", str(TESTBED), "--ctld"], env=env, check=True, timeout=30, capture_output=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = self.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%T", check=False, timeout=30).stdout.split()
            if len(states) == len(self.nodes) and all(
                    s in ("idle", "allocated", "mixed", "completing") for s in states):
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
            if not any(j.strip() for j in jobs) and states == ["idle"] * len(self.nodes):
                return
            time.sleep(0.3)
        raise AssertionError(f"testbed not idle after {timeout}s: jobs {jobs}, node states {states}; "
                             f"{self.why_not_idle()}")

    def why_not_idle(self) -> str:
        """What Slurm says of nodes that are not up: each one's reason, and the controller log's lines
        that set a node down or drained (for a test's failure message)."""
        reasons = self.run("sinfo", "-h", "-R", "-o", "%N %T %E (%H)", check=False).stdout.strip()
        log = self.lab / "log" / "slurmctld.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        said = [ln for ln in lines if re.search(r"drain|state set to DOWN|not responding|Kill task", ln, re.I)]
        return f"node reasons: {reasons or 'none'}; controller log: {said[-12:]}"

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


@contextmanager
def _started(nodes: int) -> Iterator[Testbed]:
    """A testbed of ``nodes`` nodes, stopped (and its directory removed) on leaving."""
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
        SLURMLAB_NODES=str(nodes),
        SLURMLAB_PORT=str(_free_port_block(2)),
        SLURMLAB_FIRST_JOB_ID=str(random.randrange(1000, 60000) * 1000),
    )
    env.pop("SLURM_CONF", None)
    if SLURM_VERSION != "22.05":  # built once (minutes) when the cache is empty; a no-op after that
        built = subprocess.run(["bash", str(TESTBED), "--build"], env=env, capture_output=True, text=True, timeout=3600)
        if built.returncode != 0:
            pytest.fail(f"Slurm {SLURM_VERSION} for the testbed could not be built:\n{built.stderr[-3000:]}")
    proc = subprocess.run(["bash", str(TESTBED)], env=env, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        pytest.fail(f"Slurm testbed did not start (rc={proc.returncode}):\n{proc.stderr[-3000:]}")
    bed = Testbed(lab=lab, slurm_conf=lab / "etc" / "slurm.conf", exports=read_env_file(lab / "testbed.env"),
                  nodes=[f"node{i}" for i in range(1, nodes + 1)])
    _SUPERVISED.append(lab / "log" / "supervise.log")
    try:
        yield bed
    finally:
        subprocess.run(["bash", str(TESTBED), "--stop"], env=env, capture_output=True, text=True, timeout=120)
        if os.environ.get("CLUSTERKIT_KEEP_TESTBED") != "1":  # keep logs for debugging on request
            shutil.rmtree(lab, ignore_errors=True)
