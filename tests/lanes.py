"""Two lanes for a parallel run of the suite: ``pytest -n N --dist loadgroup`` (tests/run.sh).

The Slurm testbed's tests are one lane, run in their usual order on one worker; every other end
to end test (the SSH lab, real local jobs: the ``sshlab`` and ``torch`` tests) is a second lane,
also in order on one worker; the fast tier fills the workers around them.  The lanes cannot meet:
the testbed's daemons, nodes and ranks live in network namespaces of their own
(tests/slurm/testbed.sh), the SSH lab's sshd on loopback addresses or in namespaces of its own,
each on ports of its own, and neither lane signals another's processes (each finds its own by
its work directory or process group).  The Slurm lane, the longest, is put first so it starts
at once rather than after the rest.

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


def lane(item: pytest.Item) -> str | None:
    """``slurm``, ``host`` (another end-to-end test) or None (the fast tier)."""
    if SLURM_DIR in Path(str(item.fspath)).resolve().parents:
        return "slurm"
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
        (slurm if name == "slurm" else rest).append(item)
    items[:] = slurm + rest
