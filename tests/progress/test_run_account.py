"""``clusterkit status JOB --run`` end to end on the local site: a real job reports its steps with
``clusterkit.progress``; the run's account has its last step, its wall time within what the test
measured around it, one allocation from the job's record and no requeue."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import CLI, REPO
from tests.progress.account_job import STEP_S, STEPS


@pytest.mark.torch
def test_a_local_run_account_has_its_steps_and_wall_time(ck: CLI, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the local site's launcher is torchrun (pip install torch, CPU build)")
    env = {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO / "toolkit")}
    before = time.time()
    res = ck.proc("submit", "--site", "local", "--out", str(tmp_path / "run"), "--wait",
                  "--", "python", str(REPO / "tests" / "progress" / "account_job.py"), env=env)
    took = time.time() - before
    assert res.code == 0, res.out + res.err
    job = json.loads(ck.proc("status", "--json", env=env).out)["job_id"]

    got = ck.proc("status", job, "--run", "--json", env=env)
    assert got.code == 0, got.err
    run = json.loads(got.out)["run"]
    assert run["jobs"] == [job] and run["steps"] == STEPS and not run["open"]
    assert STEPS * STEP_S <= run["wall_s"] <= took + 1   # the result file's time has whole seconds
    assert run["allocation_count"] == 1 and run["requeues"] == 0 and run["requeued_s"] == 0
    (alloc,) = run["allocations"]
    assert alloc["source"] == "record" and alloc["state"] == "COMPLETED"
    assert 0 < run["goodput"] <= 1 and run["kept_s"] == run["allocated_s"] == alloc["elapsed_s"]

    text = ck.proc("status", job, "--run", env=env)
    assert text.code == 0, text.err
    assert f"step {STEPS}" in text.out and "0 requeue(s)" in text.out, text.out


@pytest.mark.torch
def test_gpus_from_the_plan_where_accounting_names_none(tmp_path: Path, ck: CLI) -> None:
    """A slurm.conf whose AccountingStorageTRES lacks gres/gpu gives AllocTRES without GPUs: the
    job's plan (a real record, rendered for the local site's 2 GPUs per node) gives the count."""
    from clusterkit.api.account import _gpus_from_plan
    from clusterkit.scheduler.records import load_record
    from clusterkit.scheduler.runaccount import Allocation

    env = {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO / "toolkit")}
    pytest.importorskip("torch", reason="the local site's launcher is torchrun (pip install torch, CPU build)")
    res = ck.proc("submit", "--site", "local", "--out", str(tmp_path / "run"), "--wait",
                  "--", "python", str(REPO / "tests" / "progress" / "account_job.py"), env=env)
    assert res.code == 0, res.out + res.err
    (path,) = (tmp_path / "state" / "jobs").glob("*.json")
    rec = load_record(path)
    warnings: list[str] = []
    none = Allocation(rec.job_id, "COMPLETED", 0.0, 0.0, 10.0, 10, 0)
    assert [a.gpus for a in _gpus_from_plan(rec, [none], warnings)] == [2]
    assert len(warnings) == 1 and "AccountingStorageTRES" in warnings[0]
    counted = Allocation(rec.job_id, "COMPLETED", 0.0, 0.0, 10.0, 10, 4)
    assert _gpus_from_plan(rec, [counted], warnings) == [counted] and len(warnings) == 1
