"""Reading a local job's results: a failed --wait ends with doctor's cause (the exception, not
torchrun's error_file boilerplate) and the doctor command; logs --rank keeps one rank's lines, which
torchrun's --tee prefixed with the global rank, and its per-rank files are kept per job and restart."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import CLI
from tests.submit.conftest import submitted_job_id

# Each rank prints its line, then waits until the other has printed: torchrun stops the other
# worker as soon as one fails, so without the wait a rank still starting on a loaded machine is
# stopped before it prints (the test then has no line of it to filter).  Then rank 1 raises and
# rank 0 waits in a step until torchrun stops it: were both to raise, the one a loaded machine
# held back could be stopped before its traceback was written (seen in a CI run).
BAD = """import os, pathlib, time
rank = os.environ["RANK"]
print(f"step 1 of rank {rank}", flush=True)
marks = pathlib.Path(MARKS)
(marks / rank).touch()
end = time.monotonic() + 300
while not all((marks / r).exists() for r in ("0", "1")) and time.monotonic() < end:
    time.sleep(0.05)
while rank == "0" and time.monotonic() < end:
    time.sleep(0.05)
x = {}
x["missing_key"]
"""


@pytest.mark.torch
def test_a_failed_wait_names_the_exception_and_doctor_and_logs_filter_by_rank(local_ck: CLI, tmp_path: Path) -> None:
    pytest.importorskip("torch")  # torchrun is the local site's launcher
    marks = tmp_path / "printed"
    marks.mkdir()
    (tmp_path / "bad.py").write_text(BAD.replace("MARKS", repr(str(marks))))
    proc = local_ck("submit", "--site", "local", "--gpus-per-node", "2", "--", "python", "bad.py", cwd=tmp_path)
    job = submitted_job_id(proc.out)
    assert proc.code == 1, proc.out + proc.err
    last = proc.out.rstrip().splitlines()[-3:]
    assert last[0] == f"Job {job} FAILED (exit code 1)"
    assert re.fullmatch(r"  cause: the training code raised an exception: KeyError: 'missing_key' "
                        r"\(rank 1, node \S+\)", last[1]), last
    assert last[2] == f"  why in full: clusterkit doctor {job}"
    one = local_ck("logs", job, "--rank", "1", cwd=tmp_path)
    assert one.code == 0, one.err
    kept = [ln for ln in one.out.splitlines() if not ln.startswith("==> ")]
    # torchrun prefixed every line of rank 1 (its traceback too) with the global rank: no other rank's line
    assert "[rank1]: step 1 of rank 1" in kept and all(ln.startswith("[rank1]: ") for ln in kept), one.out
    assert any("KeyError: 'missing_key'" in ln for ln in kept), one.out
    both = local_ck("logs", job, cwd=tmp_path).out
    assert "[rank0]: step 1 of rank 0" in both and "[rank1]: step 1 of rank 1" in both
    # and torchrun's own files, one folder per job and restart, node, launch, attempt and local rank
    run_dir = Path(json.loads(local_ck("status", job, "--json", cwd=tmp_path).out)["run_dir"])
    kept_files = sorted((run_dir / "logs" / f"torchrun-{job}.r0").glob("*/*/attempt_0/*/stdout.log"))
    assert [p.parent.name for p in kept_files] == ["0", "1"], kept_files
    assert [p.read_text() for p in kept_files] == ["step 1 of rank 0\n", "step 1 of rank 1\n"]


def test_a_log_file_named_for_a_node_or_rank_is_kept_whole_or_left_out() -> None:
    from clusterkit.diagnose.logfilter import LogFilter

    node4, rank5, batch = Path("123.r0.node4.out"), Path("123.r0.rank5.out"), Path("slurm-123.out")
    assert LogFilter(node="node4").keeps("anything", node4) and not LogFilter(node="node5").keeps("x", node4)
    assert LogFilter(rank=5).keeps("anything", rank5) and not LogFilter(rank=4).keeps("[rank4]: x", rank5)
    assert LogFilter(rank=4).keeps("[rank4]: x", batch) and not LogFilter(rank=4).keeps("[rank3]: x", batch)
