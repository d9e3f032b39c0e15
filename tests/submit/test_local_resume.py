"""--run-name on the local site: the second job of a run finds the first one's checkpoints
(they live beside the run directories, not inside one of them)."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest

from tests.conftest import CLI
from tests.submit.conftest import submitted_job_id

TRAIN = """\
import os, pathlib
ckpt = pathlib.Path(os.environ["CK_CHECKPOINT_DIR"])
if int(os.environ.get("RANK", "0")) == 0:
    step = int((ckpt / "step").read_text()) if (ckpt / "step").exists() else 0
    print(f"resumed at step {step}" if step else "starting fresh", flush=True)
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "step").write_text(str(step + 10))
"""


@pytest.mark.torch
def test_second_job_of_a_run_name_resumes_on_the_local_site(local_ck: CLI, tmp_path: Path) -> None:
    pytest.importorskip("torch")  # torchrun is the local site's launcher
    (tmp_path / "train.py").write_text(TRAIN)
    outs = []
    for _ in range(2):  # each with its own default run directory, as a user submits it
        proc = local_ck("submit", "--site", "local", "--gpus-per-node", "1", "--run-name", "lm-a", "--",
                        "python", "train.py", cwd=tmp_path)
        assert proc.code == 0, proc.out + proc.err
        submitted_job_id(proc.out)
        outs.append(proc.out)
    assert "starting fresh" in outs[0] and "resumed at step 10" in outs[1], outs
    assert (tmp_path / "runs" / "checkpoints" / getpass.getuser() / "lm-a" / "step").read_text() == "20"
    assert len([d for d in (tmp_path / "runs").iterdir() if d.name != "checkpoints"]) == 2
