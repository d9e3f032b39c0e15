"""The README's tour from a checkout that is neither under /tmp nor the current directory:
every testbed node is this machine, so the testbed site declares all of its disk shared and a
multi-node run directory in the checkout's ./runs is accepted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

TOUR = ["render", "--site", "testbed", "--nodes", "4", "--out", "runs/tour", "--", "python",
        "examples/allreduce.py"]


@pytest.fixture
def checkout_elsewhere() -> Iterator[Path]:
    """A copy of the checkout's tracked files under /var/tmp (outside /tmp and outside here)."""
    base = Path("/var/tmp")
    if not base.is_dir() or not os.access(base, os.W_OK):
        pytest.skip("needs a writable /var/tmp")
    root = Path(tempfile.mkdtemp(prefix="ck-tour-", dir=base)) / "clusterkit"
    files = subprocess.run(["git", "ls-files", "-z", "toolkit", "site_configs", "templates", "examples"],
                           cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, files):
        src, dst = REPO / os.fsdecode(name), root / os.fsdecode(name)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    try:
        yield root
    finally:
        shutil.rmtree(root.parent)


def test_readme_tour_renders_from_a_checkout_anywhere(checkout_elsewhere: Path) -> None:
    root = checkout_elsewhere
    assert not str(root).startswith(("/tmp/", str(Path.cwd()) + "/"))
    env = {**os.environ, "PYTHONPATH": str(root / "toolkit"), "CLUSTERKIT_STATE_DIR": str(root / "state")}
    env.pop("CLUSTERKIT_SITES", None)
    p = subprocess.run([sys.executable, "-m", "clusterkit", *TOUR], cwd=root, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    (run,) = (root / "runs").glob("tour")
    script = (run / "job.sbatch").read_text()
    assert "#SBATCH --nodes=4" in script and f"{root}/runs/" in script
    # it is the copy that ran (its own site file and package), not the checkout the tests run from
    check = subprocess.run([sys.executable, "-c", "import clusterkit; print(clusterkit.__file__)"], cwd=root,
                           env=env, capture_output=True, text=True, check=True)
    assert check.stdout.startswith(str(root))
