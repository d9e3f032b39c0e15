"""The README's tour for ML engineers on the test cluster, each command as written there, from
a copy of the checkout elsewhere: render, submit, status, status --all, logs --follow, cancel."""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path

import pytest

from tests.cli.test_tour_anywhere import checkout_elsewhere  # noqa: F401  (the fixture)
from tests.conftest import REPO

from .conftest import CK

pytest.importorskip("torch", reason="examples/allreduce.py needs torch (pip install torch, CPU build)")


def _tour() -> list[list[str]]:
    """The command lines of the README's tour block, comments dropped."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"## A 5-minute tour for ML engineers\n\n```bash\n(.*?)```", readme, re.S)
    assert block, "the README has no tour for ML engineers"
    return [shlex.split(line, comments=True) for line in block.group(1).splitlines() if line.strip()]


def test_readme_tour_runs_on_the_testbed(cli: CK, checkout_elsewhere: Path) -> None:  # noqa: F811
    root = checkout_elsewhere
    env = cli.env(PYTHONPATH=str(root / "toolkit"))
    env.pop("CLUSTERKIT_SITES", None)
    env.pop("CLUSTERKIT_SITE", None)
    tour = _tour()
    assert [a[1] for a in tour] == ["sites", "render", "runs/tour/job.sbatch", "submit", "status", "status",
                                    "logs", "cancel"], tour
    job = ""
    for argv in tour:
        if argv[0] == "cat":  # the shell's glob: the script render wrote
            (script,) = glob.glob(str(root / argv[1]))
            assert "#SBATCH --nodes=4" in Path(script).read_text()
            continue
        args = [job if a in ("42", "43") and job else a for a in argv[1:]]  # the README's placeholder ids
        res = cli.ck.proc(*args, cwd=root, env=env, timeout=600)
        assert "Traceback" not in res.err, res
        assert res.code == 0, (args, res)
        if args[0] == "submit":
            m = re.search(r"Submitted job (\d+)", res.out)
            assert m, res
            job = m.group(1)
        elif args == ["status"]:  # the latest job, in detail
            assert res.out.startswith(f"job {job} ") and "the latest you submitted" in res.err, res
        elif args[0] == "status":
            assert re.search(rf"^{job}\s+testbed\s", res.out, re.M), res
        elif args[0] == "logs":  # --follow: to the job's end
            assert "allreduce OK: world_size=32" in res.out, res
        elif args[0] == "cancel":  # one job named twice, ended by now: nothing to cancel
            assert res.out == f"Job {job} already ended (COMPLETED); nothing to cancel.\n", res
    assert job
