"""The embedded default: ``--site local`` runs the rendered script here, through submitit's
local executor; and ``submit --dry-run`` prints exactly the script sbatch would get."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _ck(tmp_path: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CLUSTERKIT_STATE_DIR=str(tmp_path / "state"))
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _job_id(out: str) -> str:
    m = re.search(r"Submitted job (\d+)", out)
    assert m, out
    return m.group(1)


def test_dry_run_prints_exactly_job_sbatch_and_submits_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _ck(tmp_path, "submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "3", "--dry-run", "--skip-preflight",
               "--out", str(out), "--", "python", "train.py", "--tag", "a'; echo x")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (out / "job.sbatch").read_text()
    assert proc.stdout.count("#SBATCH --nodes=3") == 1
    assert not (tmp_path / "state").exists()


@pytest.mark.torch
def test_local_site_runs_allreduce_and_prints_the_result(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = _ck(tmp_path, "submit", "--site", "local", "--out", str(tmp_path / "run"), "--",
               "python", "examples/allreduce.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _job_id(proc.stdout)
    assert "allreduce rank 0/2" in proc.stdout and "allreduce rank 1/2" in proc.stdout
    assert "allreduce OK: world_size=2 sum=3 expected=3 ranks_ok=2/2" in proc.stdout
    assert f"Job {job} COMPLETED (exit code 0)" in proc.stdout
    st = json.loads(_ck(tmp_path, "status", job, "--json").stdout)
    assert (st["state"], st["exit_code"], st["site"]) == ("COMPLETED", 0, "local")
    assert (tmp_path / "run" / f"{job}.result").read_text() == "0\n"


@pytest.mark.torch
def test_local_failure_is_reported_with_the_log_tail(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "fail.py"
    script.write_text("import sys\nprint('about to fail', flush=True)\nsys.exit(3)\n")
    proc = _ck(tmp_path, "submit", "--site", "local", "--gpus-per-node", "1", "--out", str(tmp_path / "run"),
               "--", "python", str(script))
    job = _job_id(proc.stdout)
    assert proc.returncode != 0 and f"Job {job} FAILED (exit code {proc.returncode})" in proc.stdout
    assert "about to fail" in proc.stdout
    human = _ck(tmp_path, "status", job)
    assert f"job {job} FAILED, exit code {proc.returncode}" in human.stdout and "about to fail" in human.stdout


@pytest.mark.torch
def test_local_job_status_and_cancel(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # torchrun is the local site's launcher
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(300)\n")
    proc = _ck(tmp_path, "submit", "--site", "local", "--gpus-per-node", "1", "--no-wait",
               "--out", str(tmp_path / "run"), "--", "python", str(script))
    assert proc.returncode == 0, proc.stderr
    job = _job_id(proc.stdout)
    deadline = time.monotonic() + 30
    while "sleeping" not in (tmp_path / "run" / f"{job}_0_log.out").read_text(errors="replace") if (
            tmp_path / "run" / f"{job}_0_log.out").exists() else True:
        assert time.monotonic() < deadline, "local job never started"
        time.sleep(0.2)
    assert json.loads(_ck(tmp_path, "status", job, "--json").stdout)["state"] == "RUNNING"
    cancelled = _ck(tmp_path, "cancel", job)
    assert cancelled.returncode == 0 and f"Cancelled job {job} (was RUNNING)" in cancelled.stdout
    deadline = time.monotonic() + 30
    while (st := json.loads(_ck(tmp_path, "status", job, "--json").stdout))["state"] == "RUNNING":
        assert time.monotonic() < deadline, "local job survived cancel"
        time.sleep(0.3)
    assert st["state"] == "CANCELLED", st
    logs = _ck(tmp_path, "logs", job)
    assert "sleeping" in logs.stdout
