"""Golden job scripts for job arrays: ``--array`` with a throttle on a multi-node stage (requeue by
ARRAYJOB_TASK, per-task port, logs, folder and checkpoints), and a ``--sweep`` (the case on the
task's index, ``{KEY}`` in the command).  Regenerate with ``--regen-golden`` and review the diff."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.render.golden_files import regen_or_compare
from tests.render.test_golden import GOLDEN, normalise

CASES = {
    "array-multi-node": ["--stage", "multi-node", "--nodes", "2", "--launcher", "torchrun", "--array", "0-15%4",
                         "--", "python", "train.py"],
    "sweep-single-node": ["--launcher", "srun", "--gpus-per-node", "1", "--sweep", "lr=0.1,3e-4",
                          "--sweep", "seed=1,2", "--array", "%2", "--", "python", "train.py", "--lr", "{lr}",
                          "--name", "run-{seed}"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_array_golden(ck, tmp_path: Path, request: pytest.FixtureRequest, case: str) -> None:
    run_dir = tmp_path / "run"
    result = ck("render", "--site", "testbed", "--job-name", "golden", "--out", str(run_dir), *CASES[case])
    assert result.code == 0, result.err
    files = {name: normalise((run_dir / name).read_text(), run_dir) for name in ("job.sbatch", "plan.json")}
    regen_or_compare(request, GOLDEN / "arrays" / case, files, case)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (Debian package shellcheck)")
def test_shellcheck_array_scripts() -> None:
    scripts = sorted(str(p) for p in (GOLDEN / "arrays").glob("*/job.sbatch"))
    assert len(scripts) == len(CASES)
    p = subprocess.run(["shellcheck", "--shell=bash", "--severity=info", *scripts], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-4000:]
