"""A sweep on the local site: the tasks run one after another in one job, each with its values
substituted for {KEY} in the command, so a sweep is tried before the cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CLI
from tests.submit.conftest import submitted_job_id

TRAIN = """\
import os, sys
if os.environ.get("RANK", "0") == "0":
    print("task", os.environ["CK_ARRAY_INDEX"], "lr", sys.argv[2], "seed", sys.argv[4],
          os.path.basename(os.environ["CK_CHECKPOINT_DIR"]), flush=True)
    sys.exit(3 if sys.argv[2] == "bad" else 0)
"""


def test_a_sweep_dry_run_on_the_local_site_lists_its_tasks(local_ck: CLI, tmp_path: Path) -> None:
    proc = local_ck("submit", "--site", "local", "--dry-run", "--no-snapshot",
                    "--sweep", "lr=0.1,0.01", "--", "python", "t.py",
                    "--lr", "{lr}", cwd=tmp_path)
    assert proc.code == 0, proc.err
    assert "array" not in proc.err.replace("sweep: 2 task(s)", "")   # nothing about an --array not typed
    assert "sweep: 2 task(s), one after another on this machine" in proc.err
    assert "task 0: lr=0.1" in proc.err and "task 1: lr=0.01" in proc.err
    assert '--lr "${CK_SWEEP_LR}"' in proc.out and "#SBATCH --array" not in proc.out


@pytest.mark.torch
def test_a_sweep_runs_on_the_local_site_task_after_task(local_ck: CLI, tmp_path: Path) -> None:
    pytest.importorskip("torch")  # torchrun is the local site's launcher
    (tmp_path / "train.py").write_text(TRAIN)
    proc = local_ck("submit", "--site", "local", "--gpus-per-node", "1", "--run-name", "sw", "--sweep",
                    "lr=0.1,bad", "--sweep", "seed=1,2", "--", "python", "train.py", "--lr", "{lr}", "--seed", "{seed}",
                    cwd=tmp_path)
    job = submitted_job_id(proc.out)
    assert "  task 3: lr=bad seed=2" in proc.out
    # torchrun's --tee prefixes each line of the one rank with its global rank
    ran = [line.removeprefix("[rank0]: ") for line in proc.out.splitlines() if line.startswith("[rank0]: task ")]
    assert ran == ["task 0 lr 0.1 seed 1 sw-0", "task 1 lr 0.1 seed 2 sw-1", "task 2 lr bad seed 1 sw-2",
                   "task 3 lr bad seed 2 sw-3"], proc.out
    # every task ran; the job's status is its first failed task's (torchrun's: 1 when a worker failed)
    assert proc.code == 1 and f"Job {job} FAILED (exit code 1)" in proc.out, proc.out + proc.err
