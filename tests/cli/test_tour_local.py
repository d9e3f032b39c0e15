"""The README's tour on the local site, as written there, from a checkout anywhere: no cluster,
the built-in ``local`` site through ``CLUSTERKIT_SITE``, a real job run by submitit's local
executor with torchrun."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_tour_anywhere import checkout_elsewhere  # noqa: F401  (the fixture)
from tests.conftest import REPO


def _local_tour() -> list[list[str]]:
    """The command lines of the README's local tour block, comments dropped."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"The same tour on this machine.*?```bash\n(.*?)```", readme, re.S)
    assert block, "the README has no local tour"
    return [shlex.split(line, comments=True) for line in block.group(1).splitlines() if line.strip()]


@pytest.mark.torch
def test_readme_local_tour_runs_as_written(checkout_elsewhere: Path) -> None:  # noqa: F811
    pytest.importorskip("torch")  # torchrun is the local site's launcher
    root = checkout_elsewhere
    tour = _local_tour()
    assert tour[0] == ["export", "CLUSTERKIT_SITE=local"]
    env = {**os.environ, "PYTHONPATH": str(root / "toolkit"), "CLUSTERKIT_STATE_DIR": str(root / "state"),
           "CLUSTERKIT_SITE": "local"}
    env.pop("CLUSTERKIT_SITES", None)
    job = None
    for argv in tour[1:]:
        assert argv[0] == "clusterkit", argv
        args = [job if a == "42" and job else a for a in argv[1:]]  # the README's placeholder job id
        p = subprocess.run([sys.executable, "-m", "clusterkit", *args], cwd=root, env=env, capture_output=True,
                           text=True, timeout=240)
        assert "Traceback" not in p.stderr, p.stderr
        if args[0] == "submit":
            assert p.returncode == 0, p.stdout + p.stderr
            assert "allreduce OK: world_size=2 sum=3 expected=3 ranks_ok=2/2" in p.stdout
            m = re.search(r"Submitted job (\d+)", p.stdout)
            assert m and p.stdout.rstrip().endswith(f"Job {m.group(1)} COMPLETED (exit code 0)"), p.stdout
            job = m.group(1)
        elif args == ["status"]:  # the latest job, in detail
            assert p.returncode == 0 and p.stdout.startswith(f"job {job} COMPLETED, exit code 0\n"), p.stdout
        elif args[0] == "status":
            assert p.returncode == 0 and re.search(rf"^{job}\s+local\s.*\bCOMPLETED\b", p.stdout, re.M), p.stdout
        elif args[0] == "doctor":
            assert p.returncode == 0 and p.stdout.startswith("ok"), p.stdout + p.stderr
        else:
            assert p.returncode == 0, p.stdout + p.stderr
    assert job is not None
