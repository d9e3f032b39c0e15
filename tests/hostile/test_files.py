"""Files a job or another user can shape (logs, the result file, job records, ssh Includes):
only regular files are opened, never blocking on the open, never through a symlink out of the
run directory, and read within a byte budget.  Each case runs the real CLI (or the real reader)
on the file as an attacker would leave it; a FIFO case that regressed would hang, so every
process run has a timeout."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clusterkit.errors import RecordError
from clusterkit.nodes.transport import ErrorKind, SSHRunner
from clusterkit.safefile import NotRegular, open_regular, read_capped
from clusterkit.scheduler.records import load_record
from clusterkit.scheduler.results import read_result_file

SECRET = "SECRET-LINE from a file outside the run directory"


def _record(state_dir: Path, run_dir: Path, job_id: str = "7", **kw: object) -> Path:
    root = state_dir / "jobs"
    root.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    data = dict(version=1, job_id=job_id, scheduler="local", site="local", site_source="x.yaml",
                stage="single-node", launcher="torchrun", job_name="ck", nnodes=1, world_size=1,
                command=["python", "train.py"], run_dir=str(run_dir), script="job.sbatch",
                submitted_at="2026-01-01T00:00:00.000000Z", host="login1", plan={}, **kw)
    path = root / f"20260101T000000000000-local-{job_id}.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def job(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A local job that ended (state cached), its run directory, and a secret file outside it."""
    (tmp_path / "secret.txt").write_text(SECRET + "\n")
    run = tmp_path / "run"
    _record(tmp_path / "state", run, state="FAILED", exit_code=1)
    return {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")}, run


def test_open_regular_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "fifo")
    (tmp_path / "f").write_text("x")
    (tmp_path / "flink").symlink_to(tmp_path / "f")
    for path, what in ((fifo, "a FIFO"), ("/dev/zero", "a device"), (tmp_path, "a directory"), (link, "a FIFO")):
        with pytest.raises(NotRegular) as err:
            open_regular(path)  # never blocks: a FIFO without a writer
        assert err.value.strerror == what
    with pytest.raises(NotRegular, match="symbolic link"):
        open_regular(tmp_path / "flink", follow_symlinks=False)
    with open_regular(tmp_path / "flink") as fh:
        assert fh.read() == b"x"


def test_read_capped_says_when_a_file_was_cut(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse.log"
    with sparse.open("wb") as fh:
        fh.truncate(1 << 40)  # a terabyte, as a job's `truncate -s 1T` leaves it
    data, cut = read_capped(sparse, 1000)
    assert (len(data), cut) == (1000, True)
    (tmp_path / "small").write_bytes(b"12")
    assert read_capped(tmp_path / "small", 2) == (b"12", False)


def test_a_result_file_that_is_a_fifo_symlink_or_huge_is_no_result(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "1.result")
    (tmp_path / "real").write_text("0\n")
    (tmp_path / "2.result").symlink_to(tmp_path / "real")
    (tmp_path / "3.result").write_text("0" + " " * 10_000_000)
    (tmp_path / "4.result").write_bytes(b"\xff\n")
    (tmp_path / "5.result").write_text("3\n")
    assert [read_result_file(tmp_path / f"{n}.result") for n in range(1, 6)] == [None, None, None, None, 3]


def test_a_record_that_is_a_fifo_huge_or_a_giant_integer_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    root.mkdir()
    os.mkfifo(root / "20260101T000000000000-local-1.json")
    with pytest.raises(RecordError, match="not a job record \\(a FIFO\\)"):
        load_record(root / "20260101T000000000000-local-1.json")
    big = root / "20260101T000000000000-local-2.json"
    big.write_text('{"version": 1, "pad": "' + "x" * (2 << 20) + '"}')
    with pytest.raises(RecordError, match="larger than 1024 KiB"):
        load_record(big)
    giant = root / "20260101T000000000000-local-3.json"
    giant.write_text('{"version": 1, "nnodes": ' + "9" * 5000 + "}")
    with pytest.raises(RecordError, match="not a job record"):
        load_record(giant)


def test_status_is_not_hung_by_fifos_in_the_records_directory_or_result_file(ck, tmp_path: Path) -> None:
    env = {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")}
    run = tmp_path / "run"
    _record(tmp_path / "state", run)  # a local job whose end is not cached: status reads 7.result
    os.mkfifo(run / "7.result")
    os.mkfifo(tmp_path / "state" / "jobs" / "20260101T000000000001-local-8.json")
    giant = tmp_path / "state" / "jobs" / "20260101T000000000002-local-9.json"
    giant.write_text('{"version": 1, "nnodes": ' + "9" * 5000 + "}")
    res = ck.proc("status", "--all", env=env, timeout=60)
    assert res.code == 0 and "Traceback" not in res.err, res
    assert "local-8.json: not a job record (a FIFO)" in res.err
    assert "local-9.json: not a job record" in res.err
    assert ck.proc("status", "7", env=env, timeout=60).code == 0


def test_logs_doctor_and_status_ignore_symlinks_out_of_the_run_directory(ck, job, tmp_path: Path) -> None:
    env, run = job
    (run / "logs").mkdir()
    (run / "logs" / "7.rank0.out").symlink_to(tmp_path / "secret.txt")
    (run / "7.node1.out").symlink_to(tmp_path / "secret.txt")
    (run / "slurm-7.out").write_text("rank 0 step 1\n")
    for args in (("logs", "7"), ("logs", "7", "--tail", "5"), ("logs", "7", "--json"), ("status", "7"),
                 ("status", "7", "--json"), ("doctor", "7"), ("doctor", "7", "--json")):
        res = ck.proc(*args, env=env, timeout=60)
        assert "Traceback" not in res.err, (args, res)
        assert SECRET not in res.out + res.err, args
        assert "secret.txt" not in res.out, args
    assert "rank 0 step 1" in ck.proc("logs", "7", env=env).out  # the real log still shows


def test_a_logs_directory_that_is_a_symlink_is_not_followed(ck, job, tmp_path: Path) -> None:
    env, run = job
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "7.rank0.out").write_text(SECRET + "\n")
    (run / "logs").symlink_to(outside)
    for args in (("logs", "7"), ("doctor", "7"), ("status", "7")):
        res = ck.proc(*args, env=env, timeout=60)
        assert SECRET not in res.out and "Traceback" not in res.err, (args, res)


def test_logs_and_doctor_are_not_hung_by_a_fifo_or_a_device(ck, job, tmp_path: Path) -> None:
    env, run = job
    os.mkfifo(run / "7.rank1.out")
    (run / "slurm-7.out").write_text("torch.OutOfMemoryError: CUDA out of memory.\n")
    for args in (("logs", "7"), ("logs", "7", "--tail", "3"), ("doctor", "7"), ("status", "7")):
        res = ck.proc(*args, env=env, timeout=60)
        assert "Traceback" not in res.err, (args, res)
    logs = tmp_path / "dlogs"
    logs.mkdir()
    os.mkfifo(logs / "hang.out")
    (logs / "train.out").write_text("torch.OutOfMemoryError: CUDA out of memory.\n")
    res = ck.proc("doctor", "--logs", str(logs), "/dev/zero", env=env, timeout=60)
    assert "gpu-oom" in res.out, res
    assert f"{logs / 'hang.out'}: a FIFO" in res.err and "/dev/zero: a device" in res.err, res.err


def test_ssh_include_has_a_total_cap(tmp_path: Path) -> None:
    # 13 files, each including the next three times: 3**12 = 531,441 reads without a total cap
    for i in range(13):
        nxt = f"Include {tmp_path}/c{i + 1}\n" * 3 if i < 12 else "Host *\n  Port 2222\n"
        (tmp_path / f"c{i}").write_text(nxt)
    runner = SSHRunner(ssh_config=str(tmp_path / "c0"))
    res = runner.run_many(["gpu001"], "true")
    (r,) = res.values()
    assert r.error is ErrorKind.CONFIG and "Include pulls in more than 256 files" in r.reason, r
    (tmp_path / "c10").write_text("Host *\n  Port 2222\n")  # 1 + 3 + ... + 3**10 reads: still over
    (tmp_path / "c3").write_text("Host *\n  Port 2222\n")   # 1 + 3 + 9 + 27 = 40 reads: fine
    assert SSHRunner(ssh_config=str(tmp_path / "c0")).resolve("gpu001").port == 2222


def test_doctor_reads_a_huge_log_only_up_to_its_cap_and_says_so(ck, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterkit.diagnose import reader

    monkeypatch.setattr(reader, "FILE_MAX_BYTES", 4 << 20)  # the real cap is 4 GiB: the same code, sooner
    logs = tmp_path / "logs"
    logs.mkdir()
    with (logs / "huge.out").open("wb") as fh:
        fh.write(b"torch.OutOfMemoryError: CUDA out of memory.\n")
        fh.write(b"step\n" * (1 << 20))  # 5 MiB written (a sparse file's holes are skipped: test_log_bounds.py)
    (logs / "small.out").write_text("rank 1 step 3\n")
    res = ck("doctor", "--logs", str(logs))
    assert res.code == 1 and "gpu-oom" in res.out, res
    assert "read 2 file(s)" in res.out and "; 1 cut at 4 MiB" in res.out
    assert f"clusterkit: warning: {logs / 'huge.out'}: read only its first 4 MiB" in res.err
    report = json.loads(ck("doctor", "--logs", str(logs), "--json").out)
    assert report["files"]["cut"] == [str(logs / "huge.out")]
    assert report["files"]["bytes"] == (4 << 20) + len("rank 1 step 3\n")
    (logs / "huge.out").unlink()
    again = json.loads(ck("doctor", "--logs", str(logs), "--json").out)
    assert again["files"]["cut"] == []


def test_a_file_exactly_at_the_cap_is_not_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterkit.diagnose import reader

    monkeypatch.setattr(reader, "FILE_MAX_BYTES", 1 << 20)
    (tmp_path / "a.out").write_bytes(b"x" * 63 + b"\n" * (1 + (1 << 20) - 64))
    scan = reader.scan_file(tmp_path / "a.out")
    assert (scan.bytes_read, scan.cut) == (1 << 20, False)
    (tmp_path / "b.out").write_bytes(b"\n" * ((1 << 20) + 1))
    scan = reader.scan_file(tmp_path / "b.out")
    assert (scan.bytes_read, scan.cut) == (1 << 20, True)
