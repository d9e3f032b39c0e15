"""Three lanes for a parallel run of the suite: ``pytest -n N --dist loadgroup`` (tests/run.sh).

The Slurm testbed's tests are two lanes, each in its usual order on one worker, each worker with
a test cluster of its own (the session's ``testbed`` fixture: its own directory, ports, network
namespaces and cgroups, as the 24.11 cluster beside them in CI): the tests that follow a job's
life through preemption, recovery and hangs (:data:`LIFE`, about half the Slurm lane's time)
and the rest.  Every other end to end test (the SSH lab, real local jobs: the ``sshlab`` and
``torch`` tests) is a third lane, also in order on one worker; the fast tier fills the workers
around them.  The lanes cannot meet: the testbeds' daemons, nodes and ranks live in network
namespaces of their own (tests/slurm/testbed.sh), the SSH lab's sshd on loopback addresses or in
namespaces of its own, each on ports of its own, and no lane signals another's processes (each
finds its own by its work directory or process group).  The Slurm lanes, the longest, are put
first so they start at once rather than after the rest.

The lanes are marked before pytest-xdist's worker names each test's group (tryfirst), so they
are found here from what is known at collection (the path, the fixtures, the module's marks),
not from the markers the conftests add later.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SLURM_DIR = Path(__file__).resolve().parent / "slurm"
#: the marks a test module gives itself for a real local job (the sshlab mark comes from a fixture)
HOST_MARKS = ("sshlab", "torch")
#: the Slurm tests of the second lane: a job's life under preemption, failure and hangs (in CI with
#: three lanes on two cores: 2,954 s of test time against 2,861 for the rest; test_perf_spares,
#: 218 s, went to the first lane for that balance)
LIFE = frozenset({
    "test_preemption", "test_lightning_requeue", "test_recovery", "test_recovery_requeue", "test_run_account",
    "test_stall", "test_stall_faults", "test_straggler_replace", "test_late_node", "test_hang_recheck",
    "test_waiting", "test_chain",
})


def lane(item: pytest.Item) -> str | None:
    """``slurm``, ``slurm-life`` (the Slurm tests of :data:`LIFE`), ``host`` (another end-to-end
    test) or None (the fast tier)."""
    path = Path(str(item.fspath)).resolve()
    if SLURM_DIR in path.parents:
        return "slurm-life" if path.stem in LIFE else "slurm"
    if "sshlab_factory" in getattr(item, "fixturenames", ()) or any(item.get_closest_marker(m) for m in HOST_MARKS):
        return "host"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):   # set on pytest-xdist's workers by --dist loadgroup
        return
    slurm, rest = [], []
    for item in items:
        name = lane(item)
        if name is not None:
            item.add_marker(pytest.mark.xdist_group(name))
        (slurm if name in ("slurm", "slurm-life") else rest).append(item)
    items[:] = slurm + rest
