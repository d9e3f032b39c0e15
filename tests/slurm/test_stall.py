"""A rank that stops making progress, on the Slurm testbed, for real: 3 nodes + 1 spare, torchrun,
the DDP loop over gloo of the recovery tests (tests/slurm/recovery_train.py) reporting its progress
with ``clusterkit.progress``, checkpointing every few steps, and taking the job's process-group
timeouts (CK_PG_TIMEOUT_START_S, then CK_PG_TIMEOUT_S: 1800 s and 600 s here, longer than this test).

The rank on node2 stops itself (SIGSTOP) after step 20 in the first attempt: every other rank
waits in its next all-reduce.  The supervisor, with a floor of 15 s (``--set stall_floor_s=15``),
finds the stall past the limit (how soon is printed), names the rank behind and its node from the ranks'
own progress files (node2's heartbeat stopped while the others' went on; py-spy, run on each node,
reads the stopped rank's stack where faulthandler cannot), records it as the
attempt's verdict, ends the step and relaunches without node2 (the spare, node4, takes its
place); training resumes from the last checkpoint and ends with the weights of an
uninterrupted run.  Every wait is for a state: the job's end in ``status --json``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from .conftest import CK
from .test_recovery import STEPS, TRAIN, _ended, _expected_weights, _text
from .test_spares import _env, _job_id, _site

pytest.importorskip("torch", reason="the training loop needs torch (pip install torch, CPU build)")

FLOOR_S, STOP_STEP = 15, 20


def _hms(clock: str) -> int:
    h, m, s = (int(x) for x in clock.split(":"))
    return h * 3600 + m * 60 + s


def test_a_rank_that_stops_stepping_is_found_and_training_resumes_from_its_checkpoint(
        cli: CK, tmp_path: Path) -> None:
    cli.bed.wait_idle()
    run_dir = cli.runs / "stall"
    proc = cli("submit", "--site", str(_site(tmp_path)), "--stage", "multi-node", "--nodes", "3", "--spares", "1",
               "--gpus-per-node", "1", "--launcher", "torchrun", "--run-name", f"stall-{time.time_ns()}",
               "--set", f"stall_floor_s={FLOOR_S}", "--set", "warmup_steps=2", "--out", str(run_dir), "--",
               "python", str(TRAIN), "--steps", str(STEPS), "--step-s", "0.3", "--fail-step", str(STOP_STEP),
               "--stall-on", "node2", env=_env(cli, tmp_path, set()), timeout=120)
    assert proc.code == 0, proc.err
    job = _job_id(proc.out)
    try:
        st = _ended(cli, job)
    finally:
        cli.bed.run("scancel", job, check=False)
    batch = _text(run_dir, "slurm-*.out")
    assert st["state"] == "COMPLETED", batch[-6000:]
    first = "".join(p.read_text(errors="replace") for p in (run_dir / "logs").glob(f"{job}.r0.*.out")
                    if ".r0.a" not in p.name)
    stopped = re.search(r"rank \d+ on node2 stops itself after step 20 at (\d+)\.\d+", first)
    assert stopped, first[-3000:]
    # found past the stall limit, by its own figure; how soon after is printed, not asserted (the
    # bound is _ended's, which only a broken watch reaches; the job log's clock is UTC, whole seconds)
    seen = re.search(r"clusterkit: (\d\d:\d\d:\d\d) watch: the run stalled: no progress since step (\d+) for "
                     r"(\d+) s, past the limit of (\d+) s: ending the launch step", batch)
    assert seen, batch[-6000:]
    limit = int(seen.group(4))
    assert FLOOR_S <= limit <= 60, seen.group(0)   # the floor, or ten median steps of about 0.3 s
    after = (_hms(seen.group(1)) - int(stopped.group(1)) % 86400) % 86400
    assert int(seen.group(3)) >= limit, seen.group(0)
    print(f"stall found {after} s after the rank stopped (limit {limit} s)")
    # the event: attempt 0's verdict is the stall, node2 named behind it, dropped; the spare takes its place
    [attempt] = cli.status(job)["attempts"]
    assert attempt["verdict"].startswith("stall: no progress since step"), attempt
    assert re.search(r"node behind: node2 \(rank \d+: its heartbeat stopped", attempt["verdict"]), attempt
    assert attempt["then"] == "relaunch" and attempt["nodes"] == ["node1", "node2", "node3"], attempt
    assert [d["host"] for d in attempt["dropped"]] == ["node2"], attempt
    assert re.search(r"attempt 0 failed \(stall: .*\): dropped node2 \(stall\); spare\(s\) node4 take their place: "
                     r"relaunching \(relaunch 1 of 3\)", batch), batch[-6000:]
    # the stack dumps asked for (SIGWINCH): the stopped rank gave none, the others wait in the gradient all-reduce
    dumps = re.search(r"watch: stack dumps: rank (\d+) on node2: no dump \(stopped, or not answering\); "
                      r"ranks (\d+),(\d+) on node1, node3: (\S+ line \d+ in \S+)", batch)
    assert dumps, batch[-6000:]
    # py-spy (the test extra installs it) read the ranks from outside in an srun --overlap step on their
    # nodes: the stopped rank too, at the line where it stopped itself; the others in the backward pass
    spied = re.search(r"watch: py-spy dumps: rank (\d+) on node2: recovery_train\.py line \d+ in main; "
                      r"ranks \d+,\d+ on node1, node3: \S+ line \d+ in \S+", batch)
    assert spied and spied.group(1) == dumps.group(1), batch[-6000:]
    # doctor shows that stall's dumps, node2's rank first (no dump, or one that came when Slurm's
    # SIGCONT before its KILL woke the stopped rank: then the frame where it stopped itself)
    doctor = cli("doctor", job)
    assert re.search(rf"py-spy dumps \(asked at \d\d:\d\d:\d\d, on a stall\): rank {spied.group(1)} on node2: "
                     r"recovery_train\.py line \d+ in main", doctor.out), doctor.out + doctor.err
    assert re.search(rf"stack dumps \(asked at \d\d:\d\d:\d\d, on a stall\): rank {dumps.group(1)} on node2: "
                     r"(no dump|recovery_train\.py line \d+ in main)", doctor.out), doctor.out + doctor.err
    # training resumed at the last checkpoint of attempt 0 and finished with the uninterrupted weights
    second = _text(run_dir, f"{job}.r0.a1.*.out")
    assert set(re.findall(r" on (node\d) step \d+ loss", second)) == {"node1", "node3", "node4"}, second[-3000:]
    saved = [int(s) for s in re.findall(r"rank 0 saved step (\d+)", first)]
    resumed = {int(s) for s in re.findall(r"resumed at step (\d+)", second)}
    assert saved and resumed == {max(saved)} and max(saved) <= STOP_STEP + 1, (resumed, saved)
    final = re.search(r"final weights (.*)", second)
    assert final, second[-3000:]
    assert [float(w) for w in final.group(1).split()] == pytest.approx(_expected_weights(), abs=1e-4)
