"""JobRecord storage and the squeue/sacct/scontrol parsers, on text captured from Slurm 22.05."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from clusterkit.errors import RecordError
from clusterkit.scheduler.base import JobStatus
from clusterkit.scheduler.logs import log_files
from clusterkit.scheduler.records import OPEN_INDEX, RECORD_VERSION, JobRecord, RecordStore, load_record
from clusterkit.scheduler.slurm.tables import (
    SlurmQuery,
    sacct_statuses,
    scontrol_statuses,
    squeue_statuses,
)
from clusterkit.scheduler.status import exit_status_of, refresh
from clusterkit.slurmtext import parse_exit_code
from clusterkit.vocab import JobState

# `squeue -h --states=all -j 7000,7001,5002,3 -o '%i|%T|%r|%N'` on the testbed
SQUEUE = """\
7000|COMPLETED|None|node[1-4]
7001|FAILED|NonZeroExitCode|node1
5002|PENDING|BeginTime|
3|FAILED|BadConstraints|
"""
# `scontrol -o show job` (one job per line), abridged to three jobs
SCONTROL = (
    "JobId=7001 JobName=f.sh UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901758 Nice=0 "
    "Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode=3:0 RunTime=00:00:00 TimeLimit=UNLIMITED NodeList=node1 BatchHost=node1 "
    "NumNodes=1 NumCPUs=1 Command=/tmp/ckt/f.sh WorkDir=/tmp/ckt StdOut=/tmp/ckt/slurm-2.out Power= \n"
    "JobId=5002 JobName=rq.sh UserId=root(0) JobState=PENDING Reason=BeginTime Dependency=(null) Requeue=1 "
    "Restarts=1 BatchFlag=1 ExitCode=0:0 NodeList=(null) NumNodes=2 Power= \n"
    "JobId=7003 JobName=sleep UserId=root(0) JobState=CANCELLED Reason=None Restarts=0 ExitCode=0:15 "
    "NodeList=node[1-2] Power= \n"
)
# `sacct -X -P -n -o JobIDRaw,State,ExitCode,NodeList` on a site with slurmdbd
SACCT = """\
12345|COMPLETED|0:0|gpu[001-004]
12346|CANCELLED by 1000|0:15|gpu007
12347|FAILED|3:0|gpu002
12348|PENDING|0:0|None assigned
12349|OUT_OF_MEMORY|0:125|gpu010
12345.batch|COMPLETED|0:0|gpu001
garbage line
"""


def test_parse_squeue() -> None:
    got = squeue_statuses(SQUEUE + "not|enough\n")
    assert set(got) == {"7000", "7001", "5002", "3"}
    assert (got["7001"].state, got["7001"].reason, got["7001"].nodes) == ("FAILED", "NonZeroExitCode", "node1")
    assert (got["5002"].state, got["5002"].reason, got["5002"].nodes) == ("PENDING", "BeginTime", None)
    assert got["7000"].reason is None and got["7000"].terminal


def test_parse_scontrol_jobs() -> None:
    got = scontrol_statuses(SCONTROL)
    assert (got["7001"].state, got["7001"].exit_code, got["7001"].restarts) == ("FAILED", 3, 0)
    assert (got["5002"].state, got["5002"].restarts, got["5002"].nodes) == ("PENDING", 1, None)
    assert (got["7003"].state, got["7003"].exit_code, got["7003"].signal) == ("CANCELLED", None, 15)


def test_parse_sacct_is_total() -> None:
    got = sacct_statuses(SACCT)
    assert set(got) == {"12345", "12346", "12347", "12348", "12349"}  # steps and garbage skipped
    assert (got["12346"].state, got["12346"].signal) == ("CANCELLED", 15)
    assert (got["12347"].state, got["12347"].exit_code) == ("FAILED", 3)
    assert got["12348"].nodes is None and not got["12348"].terminal
    assert sacct_statuses("JobIDRaw|State|ExitCode|NodeList\n1|WEIRD-STATE?|x|n1\n")["1"].state == "UNKNOWN"


def test_exit_codes() -> None:
    assert parse_exit_code("3:0") == (3, None) and parse_exit_code("0:15") == (None, 15)
    assert parse_exit_code("") == (None, None) and parse_exit_code("n/a") == (None, None)
    assert exit_status_of(JobStatus("CANCELLED", signal=15)) == 143
    assert exit_status_of(JobStatus("LOST")) == 1 and exit_status_of(JobStatus("COMPLETED")) == 0


def _record(tmp_path: Path, job_id: str = "42", **kw) -> JobRecord:
    base = dict(job_id=job_id, scheduler="slurm", site="testbed", site_source="site_configs/testbed.yaml",
                stage="multi-node", launcher="torchrun", job_name="ck-train", nnodes=2, world_size=16,
                command=["python", "train.py"], run_dir=str(tmp_path / "run"), script=str(tmp_path / "run/job.sbatch"),
                submitted_at="2026-11-29T12:00:00.000001Z", host="login1", plan={"nnodes": 2})
    base.update(kw)
    return JobRecord(**base)


def test_store_roundtrip_and_find(tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "jobs")
    a = _record(tmp_path, "42")
    b = _record(tmp_path, "42", site="other", submitted_at="2026-11-29T13:00:00.000000Z")
    store.save(a)
    store.save(b)
    assert store.find("testbed:42") == a and store.find("42") == b  # newest wins for a bare id
    with pytest.raises(RecordError, match="no job record for '43'"):
        store.find("43")
    assert [p.name for p in store.files()] == ["20261129T120000000001-testbed-42.json",
                                               "20261129T130000000000-other-42.json"]


@pytest.mark.parametrize("content, message", [
    ('{"version": 2, "job_id": "1"}', f"written by a newer clusterkit \\(this one reads up to {RECORD_VERSION}\\)"),
    ('{"version": 0, "job_id": "1"}', "version 0 is older than any this clusterkit can migrate"),
    ('{"job_id": "1"}', "not a clusterkit job record \\(no 'version' field\\)"),
    ('{"version": "one"}', "version 'one' is not an integer"),
    ('{"version": 1, "job_id": "1"', "invalid JSON at line 1"),
    ('{"version": 1, "job_id": "1"}', "job record version 1: scheduler: Field required"),
], ids=["newer", "older", "no-version", "bad-version", "truncated", "missing-fields"])
def test_bad_records_are_refused_clearly(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "20260101T000000000000-testbed-1.json"
    path.write_text(content)
    with pytest.raises(RecordError, match=message):
        load_record(path)
    good, bad = RecordStore(tmp_path).load_all()
    assert good == [] and len(bad) == 1


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = RecordStore(tmp_path / "jobs")
    rec = _record(tmp_path)
    path = store.save(rec)
    before = path.read_bytes()

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("clusterkit.scheduler.records.os.replace", boom)
    with pytest.raises(RecordError, match="cannot write job record: No space left on device"):
        store.save(rec.model_copy(update={"state": JobState.COMPLETED}))
    left = sorted(p.name for p in (tmp_path / "jobs").iterdir())
    assert path.read_bytes() == before and left == [OPEN_INDEX, path.name]  # (the open index)
    assert [p.name for p in (tmp_path / "jobs" / OPEN_INDEX).iterdir()] == [path.name]  # still open


def test_records_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path / "state"))
    assert RecordStore().root == tmp_path / "state" / "jobs"
    monkeypatch.delenv("CLUSTERKIT_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert RecordStore().root == tmp_path / "xdg" / "clusterkit" / "jobs"


def _fake_slurm(outputs: dict[str, tuple[int, str, str]]):
    """A stand-in for the subprocess seam returning captured output per command name."""
    def run(argv, timeout):
        rc, out, err = outputs[argv[0]]
        return subprocess.CompletedProcess(list(argv), rc, out, err)
    return run


def test_refresh_many_jobs_costs_three_calls_without_sacct(tmp_path: Path) -> None:
    recs = [_record(tmp_path, jid) for jid in ("7001", "5002", "7003", "99")]
    query = SlurmQuery(run=_fake_slurm({
        "squeue": (0, "7001|FAILED|NonZeroExitCode|node1\n5002|PENDING|BeginTime|\n", ""),
        "sacct": (1, "", "Slurm accounting storage is disabled\n"),
        "scontrol": (0, SCONTROL, ""),
    }))
    got = {rec.job_id: st for rec, st in refresh(recs, query)}
    assert [c[0] for c in query.calls] == ["squeue", "sacct", "scontrol"]
    assert (got["7001"].state, got["7001"].exit_code) == ("FAILED", 3)
    assert (got["5002"].state, got["5002"].restarts, got["5002"].exit_code) == ("PENDING", 1, None)
    assert (got["7003"].state, got["7003"].signal) == ("CANCELLED", 15)   # only scontrol still knows it
    assert got["99"].state == "LOST"                                       # nobody knows it, no result file


def test_result_file_answers_for_a_forgotten_job(tmp_path: Path) -> None:
    rec = _record(tmp_path, "77")
    Path(rec.run_dir).mkdir()
    (Path(rec.run_dir) / "77.result").write_text("5\n")
    query = SlurmQuery(run=_fake_slurm({"squeue": (1, "", "slurm_load_jobs error: Invalid job id specified\n"),
                                        "sacct": (0, "", ""), "scontrol": (0, "", "")}))
    ((_, st),) = refresh([rec], query)
    assert (st.state, st.exit_code, st.source) == ("FAILED", 5, "result-file")


def test_log_files_batch_log_first_then_nodes(tmp_path: Path) -> None:
    rec = _record(tmp_path, "12")
    logs = Path(rec.run_dir) / "logs"
    logs.mkdir(parents=True)
    for name in ("12.node2.out", "12.node10.out", "slurm-12.out", "slurm-123.out", "12.node1.out", "notes.txt"):
        (logs / name).write_text("x\n")
    assert [p.name for p in log_files(rec)] == ["slurm-12.out", "12.node1.out", "12.node2.out", "12.node10.out"]
    assert json.loads(rec.model_dump_json())["version"] == RECORD_VERSION


def _local_done_record(tmp_path: Path, store: RecordStore, job_id: str, code: int) -> JobRecord:
    rec = _record(tmp_path, job_id, scheduler="local", site="local", run_dir=str(tmp_path / f"run{job_id}"))
    Path(rec.run_dir).mkdir()
    (Path(rec.run_dir) / f"{job_id}.result").write_text(f"{code}\n")
    (Path(rec.run_dir) / f"{job_id}_0_log.out").write_text("hello from the job\n")
    store.save(rec)
    return rec


def test_status_cli_lists_jobs_and_warns_about_bad_records(ck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path / "state"))
    empty = ck("status")
    assert empty.code == 0 and "No jobs recorded in" in empty.out
    store = RecordStore()
    _local_done_record(tmp_path, store, "1001", 0)
    _local_done_record(tmp_path, store, "1002", 7)
    (store.root / "20990101T000000000000-local-1003.json").write_text('{"version": 9, "job_id": "1003"}')
    res = ck("status", "--all")
    assert res.code == 0
    assert re.search(r"1002 .*FAILED.* 7 ", res.out) and re.search(r"1001 .*COMPLETED.* 0 ", res.out), res.out
    assert "skipping unreadable record" in res.err and "written by a newer clusterkit" in res.err
    one = ck("status", "1003")
    assert one.code == 1 and one.lines == [
        f"clusterkit: error: {store.root}/20990101T000000000000-local-1003.json: job record version 9 was "
        f"written by a newer clusterkit (this one reads up to {RECORD_VERSION}); upgrade clusterkit to read it"]
    failed = ck("status", "1002")
    assert "job 1002 FAILED, exit code 7" in failed.out and "hello from the job" in failed.out
    logs = json.loads(ck("logs", "1001", "--json").out)
    assert logs["files"][0]["lines"] == ["hello from the job"]
    both = ck("logs", "1001", "--follow", "--json")
    assert both.code == 2 and both.lines == ["clusterkit: error: --follow and --json cannot be combined"]
    missing = ck("cancel", "4242")
    assert missing.code == 2 and "no job record for '4242'" in missing.err
