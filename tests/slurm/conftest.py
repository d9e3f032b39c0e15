"""The Slurm test cluster: started once per test session by ``testbed.sh``, stopped at the end.

Every node is a network namespace of its own on a bridge (``testbed.sh`` says how they are laid
out), slurmctld and slurmdbd (on a private MariaDB) run in the controller's namespace, and this
machine reaches both through a forwarder on 127.0.0.1.  Every test in this directory is marked
``slurm`` and skipped, with the reason, where Slurm cannot run (not root, Slurm/munge/MariaDB
binaries missing).  Each session picks free TCP ports for the forwarder and a random first job id.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import CLI, CLIResult, Wrap
from tests.slurm.slurmlab import (  # noqa: F401  (re-exported: the tests import them from here)
    HERE,
    NODES,
    REPO,
    TESTBED,
    Testbed,
    _free_port_block,
    _started,
    _supervise_offsets,
    daemon_deaths,
    read_env_file,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slurm)


# The testbed's supervisor (testbed.sh) restarts a slurmctld, slurmdbd or slurmd that died and
# writes one line per death to log/supervise.log.  A test that fails while a daemon died has
# those lines in its report (and in the one-line summary), so the failure names the dead daemon
# instead of showing only a timeout.
# (the log's offsets and lines: tests/slurm/slurmlab.py)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    if call.when == "setup":
        item.stash[_OFFSETS] = _supervise_offsets()
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.failed:
        return
    deaths = daemon_deaths(item.stash.get(_OFFSETS, {}))
    if not deaths:
        return
    report.sections.append(("Slurm testbed: daemons that died during this test", "\n".join(deaths)))
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        crash.message = f"[testbed: {'; '.join(d.split(' died', 1)[0] for d in deaths)} died] {crash.message}"


_OFFSETS = pytest.StashKey[dict[Path, int]]()


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    """Start munge, MariaDB, slurmdbd, slurmctld and 4 slurmd (gpu:8 each) for the session; stop them after."""
    with _started(NODES) as bed:
        yield bed


@pytest.fixture(scope="module")
def testbed5() -> Iterator[Testbed]:
    """A 5-node testbed (``SLURMLAB_NODES=5``) for the module: the performance check's tests
    need a node that sits a pairing out and two more to compare it with."""
    with _started(5) as bed:
        yield bed


#: the states a job ends in
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")


@dataclass
class CK:
    """``ck`` against the testbed, as a user runs it: a process with SLURM_CONF, the checkout's
    python first on PATH, and job records of its own."""

    bed: Testbed
    state_dir: Path
    runs: Path
    accounting: bool = True  # False: ck runs as at a site without slurmdbd (sacct fails)
    ck: CLI = field(default_factory=CLI)  # the test's ck; module-wide fixtures get a process-only CLI()

    def env(self, *, login: bool = False, **extra: str) -> dict[str, str]:
        return self.bed.env(accounting=self.accounting, login=login, CLUSTERKIT_STATE_DIR=str(self.state_dir), **extra)

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

    def requeued_then_ended(self, job: str, timeout: float = 240) -> dict:
        """Wait for the job's requeue, release it from Slurm's hold (BeginTime, about two minutes
        after a requeue), then wait for its end; its last status.  Not within the second of the
        requeue: slurmd revokes the old run's credential with 1 s resolution, and a restart stamped
        in that second fails ("Job credential revoked")."""
        self.wait_for(job, lambda s: s["state"] in ("PENDING", *TERMINAL) and (s["restarts"] or 0) >= 1,
                      timeout=timeout, what="the requeue")
        time.sleep(1.2)
        self.bed.run("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)
        return self.wait_for(job, lambda s: s["state"] in TERMINAL, timeout=timeout, what="the job's end")

    def wait_for(self, job: str, predicate, timeout: float = 60, what: str = "state") -> dict:
        """Poll ``status JOB --json`` until ``predicate(status)`` holds."""
        deadline = time.monotonic() + timeout
        st: dict = {}
        while time.monotonic() < deadline:
            st = self.status(job)
            if predicate(st):
                return st
            time.sleep(0.5)
        raise AssertionError(f"job {job}: {what} not reached in {timeout}s; last status {st}; "
                             f"{self.bed.why_not_idle()}")


@pytest.fixture
def cli(ck: CLI, testbed: Testbed, tmp_path: Path) -> CK:
    """``ck`` bound to the testbed, records under tmp_path/state, run dirs under tmp_path/runs."""
    # run directories must be readable by the job's processes, which run as root like us
    tmp_path.chmod(0o755)
    return CK(bed=testbed, state_dir=tmp_path / "state", runs=tmp_path / "runs", ck=ck)
