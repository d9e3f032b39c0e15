"""A controller that does not answer: jobs are UNKNOWN and stale, never LOST; records keep every update.

The Slurm commands here are stand-ins (the fault is the point): they print the real error
texts of slurm-wlm 22.05 clients, as captured from its libslurm. The same faults against the
real testbed are in tests/slurm/test_submit_faults.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path

import pytest

from clusterkit.errors import RecordError
from clusterkit.scheduler.base import JobStatus
from clusterkit.scheduler.records import OPEN_INDEX, JobRecord, RecordStore, load_record
from clusterkit.scheduler.slurm.tables import SlurmQuery
from clusterkit.scheduler.status import may_still_run, refresh, remember, wait

from ..conftest import assert_one_line_error

# (exit status, stderr) of squeue when slurmctld does not answer, as Slurm prints them
SQUEUE_FAULTS = {
    "busy-timeout": (1, "slurm_load_jobs error: Socket timed out on send/recv operation\n"),
    "controller-down": (1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"),
    "munge-auth": (1, "squeue: error: Munge decode failed: Invalid credential\n"
                      "slurm_load_jobs error: Protocol authentication error\n"),
    "bad-config": (1, "squeue: error: Invalid user for SlurmUser slurm, ignored\n"
                      "squeue: fatal: Unable to process configuration file\n"),
    "no-answer": (124, "squeue: no answer in 30s"),        # what run_command makes of a hang
    "vanished": (127, "squeue: command not found"),         # what run_command makes of no squeue
}


def _record(tmp_path: Path, job_id: str, **kw: object) -> JobRecord:
    base: dict[str, object] = dict(
        job_id=job_id, scheduler="slurm", site="testbed", site_source="site_configs/testbed.yaml",
        stage="single-node", launcher="srun", job_name="ck-train", nnodes=1, world_size=1,
        command=["python", "train.py"], run_dir=str(tmp_path / f"run{job_id}"),
        script=str(tmp_path / f"run{job_id}/job.sbatch"), submitted_at=f"2026-11-29T12:00:00.{int(job_id):06d}Z",
        host="login1", plan={})
    base.update(kw)
    Path(str(base["run_dir"])).mkdir(exist_ok=True)
    return JobRecord(**base)  # type: ignore[arg-type]


def _squeue_fails(rc: int, err: str):
    """A stand-in for the subprocess seam: squeue fails; sacct/scontrol would answer (never asked)."""
    def run(argv, timeout):
        if argv[0] == "squeue":
            return subprocess.CompletedProcess(list(argv), rc, "", err)
        return subprocess.CompletedProcess(list(argv), 0, "", "")
    return run


@pytest.mark.parametrize("fault", SQUEUE_FAULTS, ids=list(SQUEUE_FAULTS))
def test_unanswered_squeue_leaves_jobs_unknown_and_local_ones_alone(tmp_path: Path, fault: str) -> None:
    rc, err = SQUEUE_FAULTS[fault]
    running = _record(tmp_path, "11")
    cached = _record(tmp_path, "12", state="COMPLETED", exit_code=0)
    ended = _record(tmp_path, "13")
    (Path(ended.run_dir) / "13.result").write_text("4\n")
    local = _record(tmp_path, "14", scheduler="local", site="local")
    (Path(local.run_dir) / "14.result").write_text("0\n")
    query = SlurmQuery(run=_squeue_fails(rc, err))
    got = {r.job_id: st for r, st in refresh([running, cached, ended, local], query)}
    assert [c[0] for c in query.calls] == ["squeue"]
    assert query.unreachable == f"cannot reach Slurm controller: {err.strip().splitlines()[-1]}"
    assert (got["11"].state, got["11"].stale, got["11"].reason) == ("UNKNOWN", True, query.unreachable)
    assert (got["12"].state, got["12"].exit_code, got["12"].stale) == ("COMPLETED", 0, True)
    assert (got["13"].state, got["13"].exit_code, got["13"].stale) == ("FAILED", 4, True)
    assert (got["14"].state, got["14"].stale) == ("COMPLETED", False)
    assert not got["11"].terminal and may_still_run(got["11"]) and may_still_run(got["12"])


def test_unknown_job_ids_are_an_answer_not_an_outage(tmp_path: Path) -> None:
    """squeue's "Invalid job id specified" means slurmctld forgot every id asked: that is an end."""
    rec = _record(tmp_path, "21")
    query = SlurmQuery(run=_squeue_fails(1, "slurm_load_jobs error: Invalid job id specified\n"))
    ((_, st),) = refresh([rec], query)
    assert (st.state, st.stale, query.unreachable) == ("LOST", False, None)
    assert not may_still_run(st)
    assert not may_still_run(JobStatus("COMPLETED", source="squeue")) and may_still_run(JobStatus("RUNNING"))


def test_stale_states_are_never_cached(tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "jobs")
    rec = _record(tmp_path, "31")
    store.save(rec)
    remember(store, rec, JobStatus("COMPLETED", exit_code=0, source="result-file", stale=True))
    assert load_record(store.path_for(rec)).state is None
    remember(store, rec, JobStatus("COMPLETED", exit_code=0, source="squeue"))
    assert load_record(store.path_for(rec)).state == "COMPLETED"


def test_wait_polls_through_an_outage_with_backoff(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five unanswered polls, then the real answer: wait reports the end, never gives up."""
    rec = _record(tmp_path, "41")
    answers = iter([(1, "", SQUEUE_FAULTS["busy-timeout"][1])] * 5 + [(0, "41|FAILED|NonZeroExitCode|node1\n", "")] * 2)

    def run(argv, timeout):
        if argv[0] == "squeue":
            return subprocess.CompletedProcess(list(argv), *next(answers))
        if argv[0] == "sacct":
            return subprocess.CompletedProcess(list(argv), 0, "41|FAILED|3:0|node1\n", "")
        raise AssertionError(argv)

    sleeps: list[float] = []
    monkeypatch.setattr("clusterkit.scheduler.status.time.sleep", sleeps.append)
    seen: list[str] = []
    st = wait(rec, query=SlurmQuery(run=run), poll_s=0.5, outage_max_s=4.0,
              on_change=lambda s: seen.append(f"{s.state}{' stale' if s.stale else ''}"))
    assert (st.state, st.exit_code, st.stale) == ("FAILED", 3, False)
    assert seen == ["UNKNOWN stale", "FAILED"]
    assert sleeps[:5] == [1.0, 2.0, 4.0, 4.0, 4.0]  # doubling, capped; then the one confirming look


def test_update_keeps_a_concurrent_update(tmp_path: Path) -> None:
    """A status that loaded the record before a cancel saved it keeps cancel_requested."""
    store = RecordStore(tmp_path / "jobs")
    rec = _record(tmp_path, "51")
    store.save(rec)
    seen_by_status = store.find("51")
    store.update(store.find("51"), cancel_requested=True)          # the cancel, meanwhile
    remember(store, seen_by_status, JobStatus("CANCELLED", signal=15, source="squeue"))
    final = load_record(store.path_for(rec))
    assert (final.state, final.signal, final.cancel_requested) == ("CANCELLED", 15, True)


def test_parallel_updates_lose_nothing(tmp_path: Path) -> None:
    """Threads updating different fields of one record at once: every field ends set."""
    store = RecordStore(tmp_path / "jobs")
    rec = _record(tmp_path, "52")
    store.save(rec)
    fields = [{"cancel_requested": True}, {"state": "CANCELLED"}, {"exit_code": 0}, {"signal": 15},
              {"reason": "by user"}] * 4
    threads = [threading.Thread(target=store.update, args=(rec,), kwargs=f) for f in fields]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = load_record(store.path_for(rec))
    assert (final.cancel_requested, final.state, final.exit_code, final.signal, final.reason) == (
        True, "CANCELLED", 0, 15, "by user")
    assert sorted(p.name for p in store.root.iterdir()) == [".lock", OPEN_INDEX, store.path_for(rec).name]
    assert not any((store.root / OPEN_INDEX).iterdir())  # ended: no longer in the open index


def test_non_utf8_record_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "20260101T000000000000-testbed-1.json"
    path.write_bytes(b'{"version": 1, "job_id": "\xff\xfe"}')
    with pytest.raises(RecordError, match="not a job record \\(not UTF-8 text at byte 26\\)"):
        load_record(path)
    deep = tmp_path / "20260101T000000000001-testbed-2.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RecordError, match="nested too deeply"):
        load_record(deep)


def _stand_in(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n# stand-in for Slurm's " + name + ": the fault under test\n" + body)
    path.chmod(0o755)


@pytest.fixture
def outage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RecordStore:
    """Records of a finished local job, a running and a finished Slurm job; squeue times out."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stand_in(bin_dir, "squeue", 'echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2\nexit 1\n')
    _stand_in(bin_dir, "scancel", f'echo "$@" >> {tmp_path}/scancel.calls\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path / "state"))
    store = RecordStore()
    local = _record(tmp_path, "101", scheduler="local", site="local")
    (Path(local.run_dir) / "101.result").write_text("0\n")
    for rec in (local, _record(tmp_path, "102"), _record(tmp_path, "103", state="COMPLETED", exit_code=0)):
        store.save(rec)
    return store


def test_status_shows_local_jobs_and_stale_slurm_states(ck, outage: RecordStore, tmp_path: Path) -> None:
    before = {p.name: p.read_bytes() for p in outage.files()}
    res = ck("status", "--all")
    assert res.code == 3, res
    assert res.lines == ["clusterkit: warning: cannot reach Slurm controller: slurm_load_jobs error: Socket timed "
                         "out on send/recv operation; Slurm jobs show their last known state, marked stale"]
    cells = [re.split(r"\s{2,}", line.strip()) for line in res.out.splitlines()]  # plain columns in a pipe
    rows = {c[0]: c for c in cells if c[0].isdigit()}
    # a terminal state stays terminal: the cached end of 103 is not marked stale
    assert (rows["101"][6], rows["102"][6], rows["103"][6]) == ("COMPLETED", "UNKNOWN (stale)", "COMPLETED")
    assert "LOST" not in res.out
    as_json = ck("status", "--all", "--json")
    jobs = {j["job_id"]: j for j in json.loads(as_json.out)["jobs"]}
    assert as_json.code == 3 and (jobs["102"]["state"], jobs["102"]["stale"]) == ("UNKNOWN", True)
    after = {p.name: p.read_bytes() for p in outage.files()}
    slurm = [n for n in before if "-testbed-" in n]
    assert [after[n] for n in slurm] == [before[n] for n in slurm]  # nothing stale was stored
    assert load_record(outage.path_for(outage.find("101"))).state == "COMPLETED"  # local: cached as usual
    one = ck("status", "102")
    assert one.code == 3 and one.out.startswith("job 102 UNKNOWN (stale), reason: cannot reach Slurm controller")


def test_cancel_reaches_scancel_when_slurm_does_not_answer(ck, outage: RecordStore, tmp_path: Path) -> None:
    res = ck("cancel", "102")
    assert res.code == 0, res
    assert res.out == "Cancelled job 102 (was UNKNOWN).\n"
    assert (tmp_path / "scancel.calls").read_text() == "-- 102\n"
    # a stale cached end is not Slurm's word now either: scancel is harmless for an ended job
    assert ck("cancel", "103").code == 0 and (tmp_path / "scancel.calls").read_text() == "-- 102\n-- 103\n"
    assert load_record(outage.path_for(outage.find("102"))).cancel_requested


def test_non_utf8_record_does_not_break_status(ck, outage: RecordStore) -> None:
    bad = outage.root / "20260101T000000000000-testbed-9.json"
    bad.write_bytes(b"\x80\x81 not text")
    res = ck("status", "--all", "--json")
    assert res.code == 3 and {j["job_id"] for j in json.loads(res.out)["jobs"]} == {"101", "102", "103"}
    assert f"skipping unreadable record: {bad}: not a job record (not UTF-8 text at byte 0)" in res.err
    assert_one_line_error(ck("status", "9"), 1, f"{bad}: not a job record (not UTF-8 text at byte 0)")
