"""The local site's time limit (``--set time``): submitit's local controller sends USR2
``scheduler.preempt_signal_s`` before it, as Slurm's ``--signal`` does; the supervisor gives every
rank SIGTERM and the grace time to save, then ends the job FAILED with the reason (the local site
cannot requeue), before the controller's kill.  Before this, USR2 killed the supervisor itself:
the ranks never saved and the job was LOST."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CLI
from tests.submit.conftest import submitted_job_id

SITE = Path(__file__).resolve().parents[2] / "site_configs" / "local.yaml"

TRAIN = """\
import os, pathlib, signal, sys, time
rank = int(os.environ["RANK"])
ckpt = pathlib.Path(os.environ["CK_CHECKPOINT_DIR"])
ckpt.mkdir(parents=True, exist_ok=True)
step = 0
def save(signum, frame):
    (ckpt / f"rank{rank}.step").write_text(str(step))
    print(f"rank {rank} saved step {step} on {signal.Signals(signum).name}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, save)
print(f"rank {rank} training", flush=True)
while True:            # never ends on its own: the time limit ends it
    step += 1
    time.sleep(0.1)
"""


@pytest.mark.torch
def test_the_local_time_limit_lets_every_rank_save_and_ends_failed_with_the_reason(local_ck: CLI,
                                                                                 tmp_path: Path) -> None:
    pytest.importorskip("torch")  # torchrun is the local site's launcher
    (tmp_path / "train.py").write_text(TRAIN)
    site = tmp_path / "here.yaml"   # the local site with a shorter warning and grace time
    site.write_text(SITE.read_text().replace('time: "00:30:00"', 'time: "00:30:00"\n  preempt_signal_s: 20\n'
                                                                 '  grace_s: 10'))
    # a 30-second limit: the warning comes 20 s before it, 10 s after the start
    proc = local_ck("submit", "--site", str(site), "--gpus-per-node", "2", "--run-name", "tl", "--set", "time=0:30",
                    "--", "python", "train.py", cwd=tmp_path, timeout=180)
    job = submitted_job_id(proc.out)
    assert proc.code == 1, proc.out + proc.err
    log = "".join(p.read_text() for p in (tmp_path / "runs").glob("*/*_log.err"))
    assert "SIGUSR2: time limit near (or preempted): SIGTERM to every rank, 10 s to save" in log, log
    for rank in (0, 1):
        assert f"rank {rank} saved step " in proc.out and "on SIGTERM" in proc.out, proc.out
    saved = sorted(p.name for p in (tmp_path / "runs" / "checkpoints").rglob("rank*.step"))
    assert saved == ["rank0.step", "rank1.step"], saved
    st = local_ck("status", job, "--json", cwd=tmp_path)
    data = json.loads(st.out)
    rec = data[0] if isinstance(data, list) else data
    assert rec["state"] == "FAILED", st.out
    assert "the local site's time limit came" in st.out and "--run-name" in st.out, st.out
    assert "LOST" not in proc.out + st.out
