"""The embedded default: ``--site local`` runs the rendered script here, through submitit's
local executor; and ``submit --dry-run`` prints exactly the script sbatch would get."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import CLI
from tests.submit.conftest import submitted_job_id


def test_dry_run_prints_exactly_job_sbatch_and_submits_nothing(local_ck: CLI, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = local_ck("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "3", "--dry-run",
                    "--no-snapshot", "--skip-preflight", "--out", str(out), "--", "python", "train.py", "--tag",
                    "a'; echo x")
    assert proc.code == 0, proc.err
    assert proc.out == (out / "job.sbatch").read_text()
    assert proc.out.count("#SBATCH --nodes=3") == 1
    assert not (tmp_path / "state").exists()


@pytest.mark.torch
def test_local_site_runs_allreduce_and_prints_the_result(local_ck: CLI, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = local_ck("submit", "--site", "local", "--out", str(tmp_path / "run"), "--",
                    "python", "examples/allreduce.py")
    assert proc.code == 0, proc.out + proc.err
    job = submitted_job_id(proc.out)
    assert "allreduce rank 0/2" in proc.out and "allreduce rank 1/2" in proc.out
    assert "allreduce OK: world_size=2 sum=3 expected=3 ranks_ok=2/2" in proc.out
    assert f"Job {job} COMPLETED (exit code 0)" in proc.out
    st = json.loads(local_ck("status", job, "--json").out)
    assert (st["state"], st["exit_code"], st["site"]) == ("COMPLETED", 0, "local")
    assert (tmp_path / "run" / f"{job}.result").read_text() == "0\n"


@pytest.mark.torch
def test_local_failure_is_reported_with_the_log_tail(local_ck: CLI, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "fail.py"
    script.write_text("import sys\nprint('about to fail', flush=True)\nsys.exit(3)\n")
    proc = local_ck("submit", "--site", "local", "--gpus-per-node", "1", "--out", str(tmp_path / "run"),
                    "--", "python", str(script))
    job = submitted_job_id(proc.out)
    assert proc.code != 0 and f"Job {job} FAILED (exit code {proc.code})" in proc.out
    assert "about to fail" in proc.out
    human = local_ck("status", job)
    assert f"job {job} FAILED, exit code {proc.code}" in human.out and "about to fail" in human.out


@pytest.mark.torch
def test_local_job_status_and_cancel(local_ck: CLI, tmp_path: Path) -> None:
    pytest.importorskip("torch")  # torchrun is the local site's launcher
    script = tmp_path / "sleeper.py"
    script.write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(300)\n")
    proc = local_ck("submit", "--site", "local", "--gpus-per-node", "1", "--no-wait",
                    "--out", str(tmp_path / "run"), "--", "python", str(script))
    assert proc.code == 0, proc.err
    job = submitted_job_id(proc.out)
    deadline = time.monotonic() + 30
    while "sleeping" not in (tmp_path / "run" / f"{job}_0_log.out").read_text(errors="replace") if (
            tmp_path / "run" / f"{job}_0_log.out").exists() else True:
        assert time.monotonic() < deadline, "local job never started"
        time.sleep(0.2)
    assert json.loads(local_ck("status", job, "--json").out)["state"] == "RUNNING"
    cancelled = local_ck("cancel", job)
    assert cancelled.code == 0 and f"Cancelled job {job} (was RUNNING)" in cancelled.out
    deadline = time.monotonic() + 30
    while (st := json.loads(local_ck("status", job, "--json").out))["state"] == "RUNNING":
        assert time.monotonic() < deadline, "local job survived cancel"
        time.sleep(0.3)
    assert st["state"] == "CANCELLED", st
    logs = local_ck("logs", job)
    assert "sleeping" in logs.out
