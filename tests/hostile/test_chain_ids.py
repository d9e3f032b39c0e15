"""A chain's ids file and a member's .unfixable mark lie in run directories others may reach: a
forged list must not cancel jobs that are not this chain's next members, and a FIFO, a link or a
huge file there must not hang or steer the job.  Real bash on the rendered script, with the
stand-ins of tests/jobscript (squeue prints the pending jobs Slurm would; scancel records)."""

from __future__ import annotations

import getpass
import os
from pathlib import Path

from tests.jobscript.harness import JOB_ID, Job
from tests.jobscript.test_long_run import PENDING_CHAIN, _chain_member

# The user's other jobs: 5000 pending with no dependency, 5001 after an unrelated job.
OTHER_JOBS = "5000 (null)\n5001 afterany:4999(unfulfilled)"


def _fail_member(run: Path, work: Path, pending: str) -> Job:
    return Job(run, work, nodes=2, JS_RANK_RC="1", JS_DOCTOR_CATEGORY="user-code", JS_SQUEUE=pending).run_through(1)


def _cancelled(j: Job) -> list[str]:
    return [c.split(" -- ", 1)[1] for c in j.calls("scancel") if c.startswith("--user=")]


def test_a_forged_ids_file_cancels_none_of_the_users_other_jobs(tmp_path: Path) -> None:
    run = _chain_member(tmp_path, 1)
    (run / "chain.ids").write_text(f"{JOB_ID}\n5000\n5001\n")
    j = _fail_member(run, tmp_path / "work", f"{PENDING_CHAIN}\n{OTHER_JOBS}")
    assert _cancelled(j) == [], j.calls("scancel")
    assert "chain: job 5000 in" in j.log() and "not touched" in j.log()


def test_a_forged_id_after_the_real_members_is_left_alone(tmp_path: Path) -> None:
    run = _chain_member(tmp_path, 1)
    (run / "chain.ids").write_text(f"{JOB_ID}\n4322\n4323\n5000\n")
    j = _fail_member(run, tmp_path / "work", f"{PENDING_CHAIN}\n{OTHER_JOBS}")
    assert _cancelled(j) == ["4322 4323"], j.calls("scancel")
    assert f"--user={getpass.getuser()} -- 4322 4323" in j.calls("scancel")


def test_a_forged_id_in_the_middle_stops_the_walk(tmp_path: Path) -> None:
    run = _chain_member(tmp_path, 1)
    (run / "chain.ids").write_text(f"{JOB_ID}\n5000\n4322\n4323\n")
    j = _fail_member(run, tmp_path / "work", f"{PENDING_CHAIN}\n{OTHER_JOBS}")
    assert _cancelled(j) == [], j.calls("scancel")


def test_an_ids_file_that_is_a_fifo_does_not_hang_the_job(tmp_path: Path) -> None:
    run = _chain_member(tmp_path, 1)
    os.mkfifo(run / "chain.ids")
    j = _fail_member(run, tmp_path / "work", PENDING_CHAIN)  # wait() is bounded: a hang fails here
    assert _cancelled(j) == []
    assert "is not a regular file" in j.log()


def test_an_ids_file_that_is_a_symlink_is_not_read(tmp_path: Path) -> None:
    run = _chain_member(tmp_path, 1)
    (tmp_path / "elsewhere").write_text(f"{JOB_ID}\n4322\n")
    (run / "chain.ids").symlink_to(tmp_path / "elsewhere")
    j = _fail_member(run, tmp_path / "work", PENDING_CHAIN)
    assert _cancelled(j) == []


def test_a_huge_ids_file_is_read_within_its_cap(tmp_path: Path) -> None:
    run = _chain_member(tmp_path, 1)
    with (run / "chain.ids").open("wb") as fh:
        fh.write(f"{JOB_ID}\n4322\n".encode())
        fh.truncate(1 << 40)
    j = _fail_member(run, tmp_path / "work", PENDING_CHAIN)
    assert _cancelled(j) == ["4322"], j.calls("scancel")


def test_a_previous_mark_that_is_a_fifo_does_not_hang_the_next_member(tmp_path: Path) -> None:
    first = _chain_member(tmp_path, 1)
    os.mkfifo(first / f"{JOB_ID}.unfixable")
    (first / "chain.ids").write_text(f"{JOB_ID}\n4325\n4326\n")
    run = _chain_member(tmp_path, 2, previous=first)
    j = Job(run, tmp_path / "work", nodes=2, SLURM_JOB_ID="4325", JS_RANK_RC="0",
            JS_SQUEUE="4326 afterany:4325(unfulfilled)").run_through(0)
    assert _cancelled(j) == []
