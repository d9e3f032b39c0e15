"""``doctor`` on a job of the local site: a real torchrun job that fails, diagnosed end to end.
Its verdict never cites Slurm, and its time is the time the root cause's log line wrote, with
no zone added (log lines name none)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import CLI, REPO


@pytest.mark.torch
def test_doctor_on_a_local_job_cites_no_slurm_and_adds_no_zone(ck: CLI, tmp_path: Path) -> None:
    pytest.importorskip("torch")  # torchrun is the local site's launcher
    local = ck.bind(process=True, cwd=REPO, timeout=180, env={"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")})
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('step 1: loss 2.31', flush=True)\nsys.exit(4)\n")
    run = tmp_path / "run"
    sub = local("submit", "--site", "local", "--gpus-per-node", "1", "--out", str(run), "--", "python", str(script))
    m = re.search(r"Submitted job (\d+)", sub.out)
    assert m and sub.code != 0, sub
    job = m.group(1)
    human = local("doctor", job)
    assert human.code == 1, human  # a failure diagnosed
    assert "slurm" not in (human.out + human.err).lower(), human
    rep = json.loads(local("doctor", job, "--json").out)
    verdict = rep["verdict"]
    assert "slurm" not in json.dumps([verdict, rep["restarts"]]).lower(), verdict
    assert rep["slurm"] is None and rep["scheduler"]["kind"] == "local" and rep["scheduler"]["state"] == "FAILED"
    # torchrun's root cause entry ("time : 2026-12-02_07:44:42"): the verdict's time, as written
    logs = "".join(p.read_text(errors="replace") for p in run.glob(f"{job}_*_log.*"))
    written = re.search(r"^\s*time\s*: (\d{4}-\d\d-\d\d)_(\d\d:\d\d:\d\d)$", logs, re.M)
    assert written, logs
    assert verdict["time"] == f"{written.group(1)}T{written.group(2)}" and verdict["rank"] == 0, verdict
    assert f"time {verdict['time']}\n" in human.out or f"time {verdict['time']}" in human.out
    # without JOB: the job submitted last, said on stderr as status and logs say it
    latest = local("doctor")
    assert latest.code == 1 and latest.out == human.out, latest
    assert f"clusterkit: job local:{job}, the latest you submitted" in latest.err
