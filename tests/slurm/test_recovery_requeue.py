"""A second failure with no spare left, on a 5-node testbed, for real: the job requeues itself
without both bad nodes, and its next run resumes training from the checkpoint.  And a spare that
went bad after the start is checked again before a relaunch takes it.

2 nodes + 1 spare (node1, node2 launched on, node3 the spare), torchrun, the DDP loop of
tests/slurm/recovery_train.py.  The rank on node2 prints a real Xid 79 capture and exits at step
8: the supervisor drops node2 and relaunches on node1 and node3, which resumes at the saved step
6.  At step 8 the rank on node3 does the same: no spare is left, so the job requeues itself with
node2 and node3 in its ExcNodeList (same job id, restart 1).  Five nodes, because the requeued job
asks for its three nodes again: on four, two remain, and the supervisor stops instead
(tests/supervise/test_replan.py pins that).  Its next run gets node1, node4 and node5, launches on
node1 and node4, resumes at step 6 and ends COMPLETED with the weights of an uninterrupted run.

The spare re-checked: the same job, but node3 (the spare) loses a GPU after the start-up check
(its nvidia-smi answers with the SSH lab's gpu_missing profile from then on).  When node2 fails,
the supervisor checks node3 again before the relaunch, finds it bad, and with no other spare
requeues without node2 and node3; the next run trains on node1 and node4.

Every wait is for a state: the job's state and restarts in ``status --json``.  Slurm holds the
requeued job about two minutes (BeginTime); the test releases it once the requeue is recorded.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml

from .conftest import CK, REPO, Testbed
from .test_recovery import STEPS, TRAIN, XID79, _expected_weights, _text
from .test_spares import PROFILES, _env, _job_id

pytest.importorskip("torch", reason="the training loop needs torch (pip install torch, CPU build)")



@pytest.fixture
def cli(ck, testbed5: Testbed, tmp_path: Path) -> CK:  # type: ignore[no-untyped-def]
    tmp_path.chmod(0o755)
    return CK(bed=testbed5, state_dir=tmp_path / "state", runs=tmp_path / "runs", ck=ck)


def _site(tmp_path: Path) -> Path:
    """The testbed site on five nodes, with the in-job preflight on (it checks each run's nodes)."""
    data = yaml.safe_load((REPO / "site_configs" / "testbed.yaml").read_text())
    data["name"] = "testbed-five"
    data["nodes"]["nodelist"] = "node[1-5]"
    data["preflight"] = {"before_submit": False, "in_job": True}
    path = tmp_path / "testbed-five.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_second_failure_with_no_spare_left_requeues_without_both_nodes(cli: CK, tmp_path: Path) -> None:
    cli.bed.wait_idle()
    run_dir = cli.runs / "second"
    proc = cli("submit", "--site", str(_site(tmp_path)), "--stage", "multi-node", "--nodes", "2", "--spares", "1",
               "--gpus-per-node", "1", "--launcher", "torchrun", "--run-name", f"recovery-second-{time.time_ns()}",
               "--out", str(run_dir), "--", "python", str(TRAIN), "--steps", str(STEPS),
               "--gpu-fault-on", "node2,node3", "--gpu-fault-log", str(XID79),
               env=_env(cli, tmp_path, set()), timeout=120)
    assert proc.code == 0, proc.err
    job = _job_id(proc.out)
    try:
        st = cli.requeued_then_ended(job)
    finally:
        cli.bed.run("scancel", job, check=False)
    batch = _text(run_dir, "slurm-*.out")
    assert st["state"] == "COMPLETED", batch[-6000:]
    # attempt 0 on node1,node2: node2 dropped, the spare node3 takes its place
    assert re.search(r"attempt 0 failed \(gpu-hardware.*\): dropped node2 \(gpu-hardware\); spare\(s\) node3 take "
                     r"their place: relaunching \(relaunch 1 of 3\)", batch), batch[-6000:]
    # attempt 1 on node1,node3: node3 fails too, no spare left: a requeue without both
    assert re.search(r"attempt 1 failed \(gpu-hardware.*\): dropped node3 \(gpu-hardware\); 1 node\(s\) to replace "
                     r"and 0 spare\(s\) left: requeueing without them", batch), batch[-6000:]
    shown = cli.bed.run("scontrol", "-o", "show", "job", job).stdout
    assert re.search(r" ExcNodeList=node\[?2[,-]3\]? ", shown) and " Restarts=1 " in shown, shown
    # every attempt resumed at the step saved before it failed, on the nodes it was given
    relaunch, requeued = _text(run_dir, f"{job}.r0.a1.*.out"), _text(run_dir, f"{job}.r1.*.out")
    first = "".join(p.read_text(errors="replace") for p in (run_dir / "logs").glob(f"{job}.r0.*.out")
                    if ".r0.a" not in p.name)
    saved0 = [int(s) for s in re.findall(r"rank 0 saved step (\d+)", first)]
    saved1 = [int(s) for s in re.findall(r"rank 0 saved step (\d+)", relaunch)]
    assert saved0 and {int(s) for s in re.findall(r"resumed at step (\d+)", relaunch)} == {max(saved0)}, relaunch
    assert set(re.findall(r"rank \d+/2 on (\S+) step", relaunch)) == {"node1", "node3"}, relaunch[-3000:]
    last = max(saved1 or saved0)
    assert {int(s) for s in re.findall(r"resumed at step (\d+)", requeued)} == {last}, requeued[-3000:]
    assert set(re.findall(r"rank \d+/2 on (\S+) step", requeued)) == {"node1", "node4"}, requeued[-3000:]
    final = re.search(r"final weights (.*)", requeued)
    assert final, requeued[-3000:]
    assert [float(w) for w in final.group(1).split()] == pytest.approx(_expected_weights(2), abs=1e-4)
    # the record: each attempt, what ended it and the node dropped; both nodes kept out of the next job
    out = cli.status(job)
    seen = [(a["restart"], a["attempt"], a["nodes"], [d["host"] for d in a["dropped"]], a["then"])
            for a in out["attempts"]]
    assert seen == [(0, 0, ["node1", "node2"], ["node2"], "relaunch"),
                    (0, 1, ["node1", "node3"], ["node3"], "requeue")], out["attempts"]
    assert {"node2", "node3"} <= {d["host"] for d in out["dropped"]}, out["dropped"]
    again = cli("submit", "--site", str(_site(tmp_path)), "--stage", "multi-node", "--nodes", "2",
                "--gpus-per-node", "1", "--launcher", "torchrun", "--exclude-from", job, "--out",
                str(cli.runs / "again"), "--dry-run", "--", "python", str(TRAIN), env=cli.env())
    assert again.code == 0, again.err
    assert "#SBATCH --exclude=node[2-3]\n" in (cli.runs / "again" / "job.sbatch").read_text()


def _env_turning_bad(cli: CK, tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The fake GPU data of tests/slurm/test_spares.py, healthy on every node; a node whose name
    is in the returned folder (a file ``bad-NODE``) answers as the gpu_missing profile from then on."""
    env = _env(cli, tmp_path, set())
    marks = tmp_path / "turned-bad"
    marks.mkdir(mode=0o755)
    bin_dir = tmp_path / "bin-turning"
    bin_dir.mkdir()
    missing, healthy = PROFILES / "gpu_missing" / "bin" / "nvidia-smi", PROFILES / "healthy" / "bin" / "nvidia-smi"
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/bash\n# the testbed node's nvidia-smi: gpu_missing once the test marks the node bad\n"
                   f'if [ -e "{marks}/bad-${{SLURMD_NODENAME:-none}}" ]; then exec {missing} "$@"; fi\n'
                   f'exec {healthy} "$@"\n')
    smi.chmod(0o755)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return env, marks


def test_a_spare_that_went_bad_is_checked_before_the_relaunch_and_kept_out(cli: CK, tmp_path: Path) -> None:
    cli.bed.wait_idle()
    run_dir = cli.runs / "recheck"
    env, marks = _env_turning_bad(cli, tmp_path)
    proc = cli("submit", "--site", str(_site(tmp_path)), "--stage", "multi-node", "--nodes", "2", "--spares", "1",
               "--gpus-per-node", "1", "--launcher", "torchrun", "--run-name", f"recovery-recheck-{time.time_ns()}",
               "--out", str(run_dir), "--", "python", str(TRAIN), "--steps", str(STEPS),
               # training (and node2's fault at its step 8) waits for node3 to turn bad, however long
               # the test takes to see the start-up check's choice
               "--hold", str(marks / "bad-node3"),
               "--gpu-fault-on", "node2", "--gpu-fault-log", str(XID79), env=env, timeout=120)
    assert proc.code == 0, proc.err
    job = _job_id(proc.out)
    try:
        # the start-up check chose its nodes (node3 healthy then, the spare); then node3 loses a GPU
        cli.wait_for(job, lambda s: (run_dir / "logs" / f"nodes-{job}.r0.json").exists(), timeout=120,
                     what="the start-up check's choice")
        (marks / "bad-node3").touch()
        st = cli.requeued_then_ended(job)
    finally:
        cli.bed.run("scancel", job, check=False)
    batch = _text(run_dir, "slurm-*.out")
    assert st["state"] == "COMPLETED", batch[-6000:]
    assert "spare, unused: node3" in batch, batch[-6000:]
    assert re.search(r"recovery: spare\(s\) failed their check before the relaunch: node3 \(failed; gpu\.count: ",
                     batch), batch[-6000:]
    assert re.search(r"attempt 0 failed \(gpu-hardware.*\): dropped node2 \(gpu-hardware\); 1 node\(s\) to replace "
                     r"and 0 spare\(s\) left: requeueing without them", batch), batch[-6000:]
    assert not list((run_dir / "logs").glob(f"{job}.r0.a1.*")), "a relaunch ran on the bad spare"
    shown = cli.bed.run("scontrol", "-o", "show", "job", job).stdout
    assert re.search(r" ExcNodeList=node\[?2[,-]3\]? ", shown) and " Restarts=1 " in shown, shown
    first = _text(run_dir, f"{job}.r0.node*.out")
    requeued = _text(run_dir, f"{job}.r1.*.out")
    saved = [int(s) for s in re.findall(r"rank 0 saved step (\d+)", first)]
    assert saved and {int(s) for s in re.findall(r"resumed at step (\d+)", requeued)} == {max(saved)}, requeued[-3000:]
    assert set(re.findall(r"rank \d+/2 on (\S+) step", requeued)) == {"node1", "node4"}, requeued[-3000:]
    final = re.search(r"final weights (.*)", requeued)
    assert final, requeued[-3000:]
    assert [float(w) for w in final.group(1).split()] == pytest.approx(_expected_weights(2), abs=1e-4)
    [attempt] = cli.status(job)["attempts"]
    assert attempt["then"] == "requeue" and [d["host"] for d in attempt["dropped"]] == ["node2", "node3"], attempt
    assert "spare failed its check: failed; gpu.count: " in attempt["dropped"][1]["why"], attempt
