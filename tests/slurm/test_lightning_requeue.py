"""Real PyTorch Lightning with ``SLURMEnvironment(auto_requeue=True)`` under clusterkit, on the testbed.

``--set stop_signal=USR1 --set requeue_by=framework``, 2 nodes x 2 ranks (srun launcher: every
rank a Slurm task, as Lightning's SLURM support expects).  On the time-limit warning (USR2 to the
batch shell: what ``--signal=B:USR2@T`` sends) clusterkit sends SIGUSR1 to every rank; each
rank's Lightning handler saves the HPC checkpoint, rank 0 requeues the job, clusterkit does not;
the next run resumes from the checkpoint and completes after exactly one requeue.

The warning is sent once every rank has parked at the start of the same step
(``lightning_train.PARK_STEP``): Lightning saves inside its signal handler, which is safe only
when the signal reaches every rank at the same point of a step (see lightning_train.py).
"""

from __future__ import annotations

import json
import os
import pwd
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import CK, REPO

#: the user the jobs run as: CK_CHECKPOINT_DIR is <storage>/checkpoints/<user>/<run name>
USER = pwd.getpwuid(os.getuid()).pw_name

pytest.importorskip("lightning", reason="PyTorch Lightning (pip install -e '.[test]')")

RANKS = 4
START_S = 420   # 4 ranks importing torch and lightning on a small shared machine


@pytest.fixture
def site(tmp_path: Path) -> Path:
    shared = tmp_path / "shared"
    shared.mkdir()
    path = tmp_path / "testbed-lightning.yaml"
    path.write_text(f"name: testbed-lightning\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\n"
                    f"storage:\n  - {{path: {shared}, type: local, shared: true, use: [checkpoints]}}\n"
                    f"  - {{path: {tmp_path}, type: local, shared: true}}\n")
    return path


def _markers(ckpt: Path, kind: str, restart: int | None) -> list[dict[str, Any]]:
    pattern = f"{kind}.r*.n{restart}.json" if restart is not None else f"{kind}.r*.json"
    return [json.loads(p.read_text()) for p in sorted(ckpt.glob(pattern))]


def _wait_markers(ckpt: Path, kind: str, restart: int | None, timeout: float, log: Path) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        got = _markers(ckpt, kind, restart)
        if len(got) == RANKS:
            return got
        if time.monotonic() > deadline:
            tail = "\n".join(log.read_text().splitlines()[-30:]) if log.exists() else f"(no {log})"
            raise AssertionError(f"{kind} markers (restart {restart}): {len(got)} of {RANKS} "
                                 f"after {timeout:.0f}s\n{tail}")
        time.sleep(1)


def test_lightning_saves_on_every_rank_requeues_once_and_resumes(cli: CK, site: Path) -> None:
    cli.bed.wait_idle()
    out = cli.runs / "lightning"
    proc = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "2",
               "--launcher", "srun", "--set", "cpus_per_task=1", "--set", "stop_signal=USR1",
               "--set", "requeue_by=framework", "--job-name", "pl", "--run-name", "pl-run", "--out", str(out),
               "--json", "--", "python", "tests/slurm/lightning_train.py")
    assert proc.code == 0, proc.err
    job = json.loads(proc.out)["job_id"]
    try:
        ckpt = site.parent / "shared" / "checkpoints" / USER / "pl-run"
        log = out / "logs" / f"slurm-{job}.out"
        started = _wait_markers(ckpt, "started", 0, START_S, log)
        assert {m["world"] for m in started} == {RANKS}
        parked = _wait_markers(ckpt, "parked", 0, 240, log)
        assert len({m["step"] for m in parked}) == 1 and parked[0]["step"] > 0, parked   # one step, past step 0
        step = parked[0]["step"]
        cli.bed.run("scancel", "--batch", "--signal=USR2", job)   # the time-limit warning
        saved = _wait_markers(ckpt, "saved", 0, 120, log)
        assert sorted(m["rank"] for m in saved) == list(range(RANKS))   # every rank's Lightning handler ran
        assert {m["step"] for m in saved} == {step}, saved   # saved where every rank parked
        assert (ckpt / "hpc_ckpt_1.ckpt").is_file()
        st = cli.wait_for(job, lambda s: s["state"] == "PENDING" and s["restarts"] == 1, timeout=120, what="requeued")
        text = log.read_text()
        assert "SIGUSR1 to every rank" in text, text
        assert "DUE TO JOB REQUEUE" in text, text                  # Slurm ended the run for Lightning's requeue
        assert "requeueing (restart" not in text, text             # clusterkit did not requeue as well
        assert not (out / f"{job}.result").exists(), st             # never ended while the requeue was pending
        time.sleep(1.2)   # see test_preemption.Jobs.release: not within the second of the requeue
        cli.bed.run("scontrol", "update", f"JobId={job}", "StartTime=now")
        resumed = _wait_markers(ckpt, "started", 1, START_S, log)
        assert {m["resumed_step"] for m in resumed} == {step}, (resumed, step)   # Lightning resumed from it
        _wait_markers(ckpt, "done", None, 240, log)
        final = cli.wait_for(job, lambda s: s["state"] == "COMPLETED", timeout=120, what="COMPLETED")
        assert final["restarts"] == 1 and final["exit_code"] == 0, final   # requeued exactly once
        assert sorted(p.name for p in ckpt.glob("hpc_ckpt_*.ckpt")) == ["hpc_ckpt_1.ckpt"]
        text = log.read_text()
        assert text.count("DUE TO JOB REQUEUE") == 1 and "requeueing (restart" not in text, text
    finally:   # a failure here must not leave the job to hold the nodes the next tests wait for
        cli.bed.run("scancel", job, check=False)
    print(f"[figures] lightning: 4/4 ranks saved at step {step}; resumed at step {step} after 1 requeue")
