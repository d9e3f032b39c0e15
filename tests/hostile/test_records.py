"""Job records are data: a record anyone could edit never names a file outside the records
directory nor an option of scancel.  Each case writes a record by hand, as an attacker would,
and runs the real CLI on it; Slurm's scancel and squeue are stand-ins recording their calls
(no Slurm controller runs in these tests)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clusterkit.errors import RecordError
from clusterkit.scheduler.records import RecordStore, load_record
from clusterkit.scheduler.slurm.tables import sacct_statuses, scontrol_statuses, squeue_statuses
from clusterkit.vocab import is_job_id
from tests.conftest import assert_one_line_error

HOSTILE_IDS = ["1/../../../victim/owned", "--me", "-u", "1 2", "../1", "1\n2", "²", "٣", "1.batch",
               "", "1" * 40, "1_", "_1", "1;id", "1,2", "--", "1\x1b[2J"]


def _write(root: Path, job_id: object, name: str = "20260101T000000000000-testbed-1.json",
           run_dir: Path | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    data = dict(version=1, job_id=job_id, scheduler="slurm", site="testbed", site_source="x.yaml",
                stage="single-node", launcher="srun", job_name="ck", nnodes=1, world_size=1,
                command=["python", "train.py"], run_dir=str(run_dir or root), script="job.sbatch",
                submitted_at="2026-01-01T00:00:00.000000Z", host="login1", plan={})
    path = root / name
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def slurm_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stand-ins for squeue (job 4242 runs), sacct (no accounting) and scancel (records argv)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"squeue": "echo '4242|RUNNING|None|n1'\n", "sacct": "exit 1\n", "scontrol": "exit 0\n",
                       "scancel": f'printf "%s\\n" "$@" >> {tmp_path}/scancel.calls\n'}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n# stand-in for Slurm's {name}\n{body}")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


@pytest.mark.parametrize("job_id", ["1", "4242", "4242_3", "9" * 20, "1_" + "9" * 10])
def test_job_ids_slurm_and_local_give_are_job_ids(job_id: str) -> None:
    assert is_job_id(job_id)


@pytest.mark.parametrize("job_id", HOSTILE_IDS)
def test_anything_else_is_not_a_job_id(job_id: str) -> None:
    assert not is_job_id(job_id)


@pytest.mark.parametrize("job_id", HOSTILE_IDS)
def test_a_record_with_a_hostile_job_id_is_refused_on_load(tmp_path: Path, job_id: str) -> None:
    path = _write(tmp_path, job_id)
    with pytest.raises(RecordError, match=r"job_id: Value error, .* is not a job id"):
        load_record(path)


@pytest.mark.parametrize("job_id", [1, None, ["1"], {"a": 1}])
def test_a_job_id_that_is_not_text_is_refused_on_load(tmp_path: Path, job_id: object) -> None:
    with pytest.raises(RecordError, match="job_id"):
        load_record(_write(tmp_path, job_id))


def test_status_writes_nothing_outside_the_records_directory(ck, slurm_bin: Path) -> None:
    root = slurm_bin / "state" / "jobs"
    bad = _write(root, "1/../../../victim/owned", run_dir=slurm_bin / "run")
    before = sorted(str(p) for p in slurm_bin.rglob("*"))
    for args in (("status", "--all"), ("status", "--all", "--json")):
        res = ck(*args)
        assert res.code == 0, res
        assert f"clusterkit: warning: skipping unreadable record: {bad}: job record version 1: job_id" in res.err
        assert "Traceback" not in res.err
    assert not (slurm_bin / "victim").exists() and not (slurm_bin.parent / "victim").exists()
    assert sorted(str(p) for p in slurm_bin.rglob("*") if ".open" not in str(p)) == \
        [p for p in before if ".open" not in p]


def test_status_and_doctor_refuse_a_job_ref_that_is_a_path(ck, slurm_bin: Path) -> None:
    _write(slurm_bin / "state" / "jobs", "1")
    for args in (("status", "1/../../x"), ("doctor", "1/../../x"), ("logs", "--", "--me"), ("cancel", "--", "--me")):
        res = ck(*args)
        assert_one_line_error(res, 2, "expected a job id or SITE:JOB_ID")
    assert not (slurm_bin / "scancel.calls").exists()


def test_cancel_never_hands_scancel_an_option(ck, slurm_bin: Path) -> None:
    root = slurm_bin / "state" / "jobs"
    _write(root, "--me", name="20260101T000000000000-testbed---me.json")
    res = ck("cancel", "testbed:--me")
    assert res.code != 0 and "Traceback" not in res.err
    assert not (slurm_bin / "scancel.calls").exists()  # scancel never ran: no `scancel --me`
    res = ck("cancel", "--", "--me")
    assert res.code != 0 and not (slurm_bin / "scancel.calls").exists()


def test_cancel_passes_a_good_id_after_double_dash(ck, slurm_bin: Path) -> None:
    _write(slurm_bin / "state" / "jobs", "4242", name="20260101T000000000000-testbed-4242.json",
           run_dir=slurm_bin / "run")
    (slurm_bin / "run").mkdir()
    res = ck("cancel", "--now", "4242")
    assert res.code == 0, res
    assert (slurm_bin / "scancel.calls").read_text().splitlines() == ["--", "4242"]
    assert load_record(RecordStore().files()[0]).cancel_requested


def test_find_refuses_a_hostile_ref_without_reading_records(tmp_path: Path) -> None:
    store = RecordStore(tmp_path)
    _write(tmp_path, "1")
    for ref in ("--me", "site:../1", "1/..", "", "site:"):
        with pytest.raises(RecordError, match="expected a job id"):
            store.find(ref)
    assert store.find("testbed:1").job_id == "1"


SQUEUE = "4242|RUNNING|None|n1\n--me|FAILED|None|n1\n1/../x|FAILED|None|n1\n²|FAILED|None|n1\n4243_2|PENDING|None|\n"
SACCT = "4242|COMPLETED|0:0|n1\n--me|FAILED|1:0|n1\n4242.batch|COMPLETED|0:0|n1\n٣|FAILED|1:0|n1\n"
SCONTROL = ("JobId=² JobState=FAILED ExitCode=1:0\nJobId=--me JobState=FAILED\n"
            "JobId=77 JobState=COMPLETED ExitCode=0:0\n")


def test_job_ids_slurm_prints_are_validated_too() -> None:
    assert set(squeue_statuses(SQUEUE)) == {"4242", "4243_2"}
    assert set(sacct_statuses(SACCT)) == {"4242"}
    assert set(scontrol_statuses(SCONTROL)) == {"77"}


@pytest.mark.parametrize(("where", "command"), [("jobs", ("status", "--all")), ("jobs", ("logs", "1")),
                                               ("jobs", ("cancel", "1")), ("jobs", ("doctor", "1")),
                                               ("open-index", ("status", "--all"))])
def test_a_flooded_records_directory_is_one_error_line(ck, slurm_bin: Path, monkeypatch: pytest.MonkeyPatch,
                                                       where: str, command: tuple[str, ...]) -> None:
    from clusterkit.scheduler import records

    monkeypatch.setattr(records, "MAX_RECORD_FILES", 50)  # the mechanism, at a size a test can make
    root = slurm_bin / "state" / "jobs"
    _write(root, "1")
    flood = root / ".open" if where == "open-index" else root
    flood.mkdir(parents=True, exist_ok=True)
    for i in range(60):
        (flood / f"20250101T000000{i:06d}-x-{i}.json").touch()
    res = ck(*command)
    # doctor's exit 1 means "a failure was diagnosed": a records problem is 2 there (its --help)
    assert_one_line_error(res, 2 if command[0] == "doctor" else 1, "more than 50 files")
