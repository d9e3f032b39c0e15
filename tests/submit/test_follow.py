"""Following a job on the local site, end to end: ``submit --follow`` streams the logs while the
job runs and exits with its status; ``logs`` without JOB is the job submitted last; ``cancel``
takes several JOBs and cancels none when one is bad."""

from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from tests.conftest import CLI, assert_one_line_error
from tests.submit.conftest import submitted_job_id


class _Lines:
    """A process's stdout read line by line in a thread, so a test can wait for one line."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line)
        self.lines.put("")

    def until(self, needle: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while not any(needle in line for line in self.seen):
            line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line, f"ended before {needle!r}; printed:\n{''.join(self.seen)}"
            self.seen.append(line)
        return "".join(self.seen)

    def rest(self) -> str:
        while (line := self.lines.get(timeout=120)):
            self.seen.append(line)
        return "".join(self.seen)


@pytest.mark.torch
def test_submit_follow_streams_the_logs_while_the_job_runs_and_exits_with_its_status(
        local_ck: CLI, tmp_path: Path) -> None:
    pytest.importorskip("torch")  # torchrun is the local site's launcher
    go = tmp_path / "go"
    script = tmp_path / "train.py"
    # a training job's shape: it reports, waits for its data (the file the test writes), fails
    script.write_text("import pathlib, sys, time\n"
                      "print('epoch 0: waiting for data', flush=True)\n"
                      f"while not pathlib.Path({str(go)!r}).exists():\n    time.sleep(0.1)\n"
                      "print('epoch 0: data arrived, giving up', flush=True)\n"
                      "sys.exit(3)\n")
    proc = local_ck.popen("submit", "--site", "local", "--gpus-per-node", "1", "--follow",
                          "--out", str(tmp_path / "run"), "--", "python", str(script))
    assert proc.stdout is not None
    lines = _Lines(proc.stdout)
    try:
        head = lines.until("epoch 0: waiting for data")
        # streamed while the job still runs: it cannot end before the file below exists
        assert proc.poll() is None
        job = submitted_job_id(head)
        assert "its state: clusterkit status " in head and " | " not in head
        go.write_text("")
        out = lines.rest()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert "epoch 0: data arrived, giving up" in out
    assert out.index("waiting for data") < out.index("data arrived") < out.index(f"Job {job} FAILED")
    assert proc.returncode != 0 and f"Job {job} FAILED (exit code {proc.returncode})" in out, (out, err)
    st = json.loads(local_ck("status", job, "--json").out)
    assert (st["state"], st["exit_code"]) == ("FAILED", proc.returncode)


@pytest.mark.parametrize("other", ["--json", "--no-wait", "--dry-run"])
def test_submit_follow_refuses_what_it_cannot_do(local_ck: CLI, other: str) -> None:
    res = local_ck("submit", "--site", "local", "--follow", other, "--", "python", "train.py")
    assert_one_line_error(res, 2, f"--follow and {other} cannot be combined")


def _records(tmp_path: Path, *states: tuple[str, str | None]) -> list[str]:
    """Ended local jobs of this user, oldest first (as ``submit`` would have saved them)."""
    from clusterkit.scheduler.records import JobRecord, RecordStore

    store = RecordStore(root=tmp_path / "state" / "jobs")
    ids = []
    for n, (job_id, state) in enumerate(states):
        run = tmp_path / f"run-{job_id}"
        run.mkdir()
        (run / f"{job_id}_0_log.out").write_text(f"log of job {job_id}\n")
        store.save(JobRecord(job_id=job_id, scheduler="local", site="local", site_source="site_configs/local.yaml",
                             stage="single-node", launcher="torchrun", job_name=f"ck-{job_id}", nnodes=1,
                             world_size=1, command=["python", "train.py"], run_dir=str(run),
                             script=str(run / "job.sh"), submitted_at=f"2026-01-01T00:00:0{n}.000000Z",
                             host="login1", plan={}, state=state, exit_code=0 if state == "COMPLETED" else None))
        ids.append(job_id)
    return ids


def test_logs_without_a_job_shows_the_latest(local_ck: CLI, tmp_path: Path) -> None:
    none = local_ck("logs")
    assert_one_line_error(none, 2, "no job records in", "yet")
    _records(tmp_path, ("5101", "COMPLETED"), ("5103", "COMPLETED"), ("5102", "CANCELLED"))
    res = local_ck("logs")
    assert res.code == 0, res
    assert "log of job 5102" in res.out and "log of job 5103" not in res.out  # the last submitted, not the highest id
    assert "job local:5102, the latest you submitted" in res.err
    assert "log of job 5101" in local_ck("logs", "5101").out and not local_ck("logs", "5101").err


@pytest.mark.torch
def test_cancel_several_checks_every_job_before_cancelling_any(local_ck: CLI, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    ended, = _records(tmp_path, ("5201", "COMPLETED"))
    script = tmp_path / "sleeper.py"
    script.write_text("import signal, sys, time\n"
                      "signal.signal(signal.SIGTERM, lambda *a: (print('saved', flush=True), sys.exit(0)))\n"
                      "print('sleeping', flush=True)\ntime.sleep(300)\n")
    run = tmp_path / "run"
    proc = local_ck("submit", "--site", "local", "--gpus-per-node", "1", "--no-wait",
                    "--out", str(run), "--", "python", str(script))
    assert proc.code == 0, proc.err
    job = submitted_job_id(proc.out)
    assert f"its logs:  clusterkit logs {job} --follow" in proc.out
    deadline = time.monotonic() + 60
    while json.loads(local_ck("status", job, "--json").out)["state"] != "RUNNING":
        assert time.monotonic() < deadline, "local job never started"
        time.sleep(0.3)
    for bad in ("4999", "not-a-job"):
        refused = local_ck("cancel", job, bad, ended)
        assert_one_line_error(refused, 2, "nothing cancelled")
        assert json.loads(local_ck("status", job, "--json").out)["state"] == "RUNNING"
    both = local_ck("cancel", job, ended, job, "--json")
    assert both.code == 0, both
    assert [(r["job"], r["cancelled"], r["state_before"]) for r in json.loads(both.out)] == [
        (f"local:{job}", True, "RUNNING"), (f"local:{ended}", False, "COMPLETED")]
    deadline = time.monotonic() + 60
    while (st := json.loads(local_ck("status", job, "--json").out))["state"] == "RUNNING":
        assert time.monotonic() < deadline, "local job survived cancel"
        time.sleep(0.3)
    assert st["state"] == "CANCELLED", st
