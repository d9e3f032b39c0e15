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
