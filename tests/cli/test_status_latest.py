"""``status`` without JOB shows the job you submitted last, as ``logs`` does; ``status --all``
(or ``--limit N``) the table of recent jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterkit.scheduler.records import JobRecord, RecordStore
from tests.conftest import assert_one_line_error


def _done(tmp_path: Path, store: RecordStore, job_id: str, code: int, when: str) -> JobRecord:
    """A local job that ended with ``code``: its result file and log are in its run directory."""
    run = tmp_path / f"run{job_id}"
    run.mkdir()
    (run / f"{job_id}.result").write_text(f"{code}\n")
    (run / f"{job_id}_0_log.out").write_text(f"log of job {job_id}\n")
    rec = JobRecord(job_id=job_id, scheduler="local", site="local", site_source="site_configs/local.yaml",
                    stage="single-node", launcher="torchrun", job_name=f"ck-job{job_id}", nnodes=1, world_size=2,
                    command=["python", "train.py"], run_dir=str(run), script=str(run / "job.sh"),
                    submitted_at=when, host="login1", plan={})
    store.save(rec)
    return rec


@pytest.fixture
def two_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RecordStore:
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path / "state"))
    store = RecordStore()
    _done(tmp_path, store, "501", 3, "2026-11-29T12:00:00.000000Z")
    _done(tmp_path, store, "502", 0, "2026-11-29T13:00:00.000000Z")
    return store


def test_status_without_job_shows_the_latest_in_detail(ck, two_jobs: RecordStore) -> None:
    res = ck("status")
    assert res.code == 0, res
    assert res.out.splitlines()[0] == "job 502 COMPLETED, exit code 0"
    assert "run directory:" in res.out and "501" not in res.out
    assert res.err == "clusterkit: job local:502, the latest you submitted\n"  # said as `logs` says it
    logs = ck("logs")
    assert logs.err == res.err and "log of job 502" in logs.out


def test_status_json_without_job_is_the_latest_job_s_document(ck, two_jobs: RecordStore) -> None:
    latest, named = ck("status", "--json"), ck("status", "502", "--json")
    assert latest.code == named.code == 0
    a, b = json.loads(latest.out), json.loads(named.out)
    assert a.pop("source") == "result-file" and b.pop("source") == "record"  # the first look cached the end
    assert a == b and (a["job_id"], a["state"]) == ("502", "COMPLETED")


def test_status_all_and_limit_show_the_table_latest_first(ck, two_jobs: RecordStore) -> None:
    table = ck("status", "--all")
    assert table.code == 0, table
    rows = [line.split()[0] for line in table.out.splitlines()[1:]]
    assert table.out.startswith("JOB ") and rows == ["502", "501"]
    one = ck("status", "--limit", "1", "--json")
    assert [j["job_id"] for j in json.loads(one.out)["jobs"]] == ["502"]


def test_a_failed_latest_job_shows_its_log_tail_and_the_doctor_hint(ck, tmp_path: Path,
                                                                   two_jobs: RecordStore) -> None:
    _done(tmp_path, two_jobs, "503", 9, "2026-11-29T14:00:00.000000Z")
    res = ck("status")
    assert res.code == 0 and res.out.startswith("job 503 FAILED, exit code 9\n"), res
    assert "why it ended: clusterkit doctor local:503" in res.out and "log of job 503" in res.out


def test_status_with_no_jobs_says_so(ck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path / "none"))
    res = ck("status")
    assert res.code == 0 and res.out.startswith("No jobs recorded in ") and "submit one first" in res.out
    assert json.loads(ck("status", "--json").out)["job"] is None


def test_job_and_all_together_is_a_usage_error(ck, two_jobs: RecordStore) -> None:
    assert_one_line_error(ck("status", "502", "--all"), 2, "give JOB, or --all/--limit")
    assert_one_line_error(ck("status", "502", "--limit", "3"), 2, "give JOB, or --all/--limit")
