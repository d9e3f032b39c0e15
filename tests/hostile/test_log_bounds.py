"""A job's logs as a job could leave them: 100,000 files, one 55 MB file, a terabyte of sparse
file.  ``logs`` and ``doctor JOB`` stay within bounds of time and memory: files are listed
without a stat each and at most ``MAX_LOG_FILES`` of them shown, a file is copied a chunk at a
time, and doctor reads a sparse file's data, not its holes.  Each runs the real CLI in its own
process (the memory it used is its own), with a timeout."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from clusterkit.scheduler.logs import MAX_LOG_FILES

# the program's own peak resident size: VmHWM starts afresh at exec, while ru_maxrss keeps that of the
# forked test process (which grows as the suite runs)
MAXRSS = ("import resource, sys\nfrom clusterkit.cli import main\nrc = 0\n"
          "try:\n main(sys.argv[1:])\nexcept SystemExit as e:\n rc = e.code\n"
          "hwm = next(ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:'))\n"
          "print('MAXRSS', hwm.split()[1], file=sys.stderr)\nsys.exit(rc)\n")


def _job(tmp_path: Path) -> tuple[dict[str, str], Path]:
    root = tmp_path / "state" / "jobs"
    root.mkdir(parents=True)
    logs = tmp_path / "run" / "logs"
    logs.mkdir(parents=True)
    data = dict(version=1, job_id="7", scheduler="local", site="local", site_source="x.yaml",
                stage="single-node", launcher="torchrun", job_name="ck", nnodes=1, world_size=1,
                command=["python", "train.py"], run_dir=str(tmp_path / "run"), script="job.sbatch",
                submitted_at="2026-01-01T00:00:00.000000Z", host="login1", plan={}, state="FAILED", exit_code=1)
    (root / "20260101T000000000000-local-7.json").write_text(json.dumps(data))
    return {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")}, logs


def _run(env: dict[str, str], *argv: str, timeout: float, out: Path) -> tuple[int, str, int, float]:
    import os

    t0 = time.monotonic()
    with out.open("wb") as fh:
        p = subprocess.run([sys.executable, "-c", MAXRSS, *argv], stdout=fh, stderr=subprocess.PIPE, text=True,
                           timeout=timeout, env={**os.environ, **env})
    took = time.monotonic() - t0
    rss = int(next(ln for ln in p.stderr.splitlines() if ln.startswith("MAXRSS")).split()[1])
    return p.returncode, p.stderr, rss, took


def test_logs_of_a_job_with_100000_log_files_is_bounded(tmp_path: Path) -> None:
    env, logs = _job(tmp_path)
    for i in range(100_000):
        (logs / f"7.r0.rank{i}.out").write_bytes(b"x\n")
    code, err, _, _ = _run(env, "logs", "7", timeout=600, out=tmp_path / "out")   # a hang guard only
    assert code == 0, err
    assert f"job 7 has 100000 log files; the first {MAX_LOG_FILES} are shown" in err
    text = (tmp_path / "out").read_text()
    assert text.count("==> ") == MAX_LOG_FILES and "7.r0.rank0.out" in text and "rank99999" not in text


def test_logs_copies_a_55_mb_file_without_holding_it(tmp_path: Path) -> None:
    env, logs = _job(tmp_path)
    line = b"step 1 loss 0.5 " + b"x" * 84 + b"\n"
    (logs / "7.r0.node1.out").write_bytes(line * 550_000)          # 55 MB
    code, err, rss_kib, _ = _run(env, "logs", "7", timeout=120, out=tmp_path / "out")
    assert code == 0, err
    assert (tmp_path / "out").stat().st_size > 55_000_000
    assert rss_kib < 100 * 1024, f"{rss_kib} KiB resident"


def test_doctor_job_on_a_terabyte_sparse_log_is_quick(tmp_path: Path) -> None:
    env, logs = _job(tmp_path)
    with (logs / "7.r0.node1.out").open("wb") as fh:
        fh.write(b"[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
        fh.truncate(1 << 40)      # `truncate -s 1T`: a hole, zeros never written
    code, err, _, _ = _run(env, "doctor", "7", timeout=600, out=tmp_path / "out")   # a hang guard only
    assert code in (0, 1) and "Traceback" not in err, err
    assert "gpu-oom" in (tmp_path / "out").read_text()


def test_doctor_on_long_lines_a_rank_printed_is_quick(tmp_path: Path) -> None:
    """A line of 66,000 characters holding an error's words, whose characters each occur an even
    number of times, looked like two ranks' interleaved copies of one line: the search for that
    line counted the rest of the line at each of its 10,000 steps (50 s a line)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    line = b"x" * 66_000 + b"NCCL WARN Cuda failure 'out of memory'\n"
    (logs / "7.r0.node1.out").write_bytes(b"hello\n" + line * 3)
    p = subprocess.run([sys.executable, "-m", "clusterkit", "doctor", "--logs", str(logs), "--json"],
                       capture_output=True, text=True, timeout=600)   # a hang guard only
    assert "Traceback" not in p.stderr and json.loads(p.stdout)["verdict"], p.stderr[-2000:]


def test_untangling_settles_a_long_even_line_and_keeps_one_past_any_exception_line() -> None:
    from clusterkit.diagnose.tangled import LONGEST, untangle

    line = "ab" * (LONGEST // 2)       # every count even: two, three and four copies are tried
    assert untangle(line + "\n")[0].startswith("ab")
    assert untangle("x" * 200_000) == ("x" * 200_000, 1)   # longer than any rank's exception line: kept
