"""The Python API on the Slurm testbed: a job submitted, followed, cancelled and diagnosed from
Python (``Site.submit``, ``Job.logs(follow=True)``, ``Job.cancel``, ``Job.wait``, ``Job.doctor``),
with the real sbatch, slurmd, srun, squeue and scancel."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from clusterkit import Job, LogLine, Site, jobs
from clusterkit.vocab import JobState

from .conftest import CK

TRAIN = """\
import pathlib, signal, sys, time

ckpt = pathlib.Path(sys.argv[1])
step = 0


def save(signum, frame):
    ckpt.write_text(f"{step}\\n")
    print(f"saved checkpoint at step {step}", flush=True)
    sys.exit(143)


signal.signal(signal.SIGTERM, save)
while True:
    print(f"step {step} loss {1.0 / (step + 1):.3f}", flush=True)
    step += 1
    time.sleep(0.3)
"""


@pytest.fixture
def api_env(cli: CK, monkeypatch: pytest.MonkeyPatch) -> CK:
    """This process talks to the testbed as the CLI does: SLURM_CONF, PATH, its own records."""
    for key in ("SLURM_CONF", "PATH", "CLUSTERKIT_STATE_DIR"):
        monkeypatch.setenv(key, cli.env()[key])
    return cli


def _wait_for(what: str, check: object, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.3)


def test_submit_follow_cancel_and_doctor_from_python(api_env: CK, tmp_path: Path) -> None:
    train, ckpt = tmp_path / "train.py", tmp_path / "ckpt.txt"
    train.write_text(TRAIN)
    site = Site.load("testbed")
    job = site.submit(["python", "-u", str(train), str(ckpt)], stage="single-node", gpus_per_node=1,
                      launcher="srun", out=api_env.runs / "api")
    assert job.unsaved is None and job.record.scheduler == "slurm" and job.id.isdigit()
    assert Job.find(job.id).key == job.key == f"testbed:{job.id}"
    assert job.run is not None and (job.run_dir / "job.sbatch").read_text() == job.run.sbatch

    followed: list[LogLine] = []
    follower = threading.Thread(target=lambda: followed.extend(job.logs(follow=True, poll_s=0.3)), daemon=True)
    follower.start()
    _wait_for("RUNNING", lambda: job.state() == JobState.RUNNING)
    _wait_for("three steps logged", lambda: any(line.startswith("step 3 ") for line in job.logs()))
    assert any(row["job"] == job.key and row["state"] == "RUNNING" for row in jobs(limit=5).rows)

    graces: list[float] = []
    done = job.cancel(on_grace=graces.append)
    assert done.cancelled and done.state_before == JobState.RUNNING and graces
    result = job.wait(timeout=120)
    assert result.state == JobState.CANCELLED and not result.ok
    follower.join(timeout=60)
    assert not follower.is_alive(), "logs(follow=True) did not end with the job"

    text = [str(line) for line in followed]
    assert "step 0 loss 1.000" in text and any(t.startswith("saved checkpoint at step ") for t in text)
    saved = int(ckpt.read_text())   # the rank's TERM handler ran inside the grace period
    assert f"saved checkpoint at step {saved}" in text and saved >= 3
    assert all(line.path.parent.name == "logs" or line.path.parent == job.run_dir for line in followed)

    last = list(job.logs(tail=1))  # `clusterkit logs JOB --tail 1`
    by_file = job.log_lines()
    assert [line.path for line in last] == [p for p, lines in by_file.items() if lines]
    assert all(str(line) == by_file[line.path][-1] for line in last)

    diagnosis = job.doctor()
    assert diagnosis.report["verdict"]["category"] == "slurm-cancelled", diagnosis.report["verdict"]
    assert job.record.diagnosis and "slurm-cancelled" in job.record.diagnosis
    again = job.cancel()
    assert not again.cancelled and again.state_before == JobState.CANCELLED
