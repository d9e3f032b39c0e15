"""``clusterkit submit`` / ``status`` / ``logs`` / ``cancel`` end to end on the Slurm testbed.

Every job runs for real: sbatch, slurmd, srun, the real launcher (torchrun's c10d rendezvous at
the head node, deepspeed --no_ssh on every node, accelerate launch, megatron-shaped torchrun, or
one srun task per rank) and a gloo all-reduce on CPU that every rank checks.  Each node is a
host of its own on the testbed's bridge: ranks meet at the head node's address, as on a cluster.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from .conftest import CK

pytest.importorskip("torch", reason="examples/allreduce.py needs torch (pip install torch, CPU build)")

# torchrun's --tee prefixes each line with the rank ("[rank3]: "); srun's and deepspeed's ranks print bare
RANK_LINE = re.compile(r"^(?:\[rank\d+\]: )?allreduce rank (\d+)/(\d+) on (\S+): sum=(\d+) expected=(\d+) ok$", re.M)


def _submitted_id(out: str) -> str:
    m = re.search(r"Submitted job (\d+)", out)
    assert m, f"no job id in output:\n{out}"
    return m.group(1)


def _rank_lines(run_dir: Path) -> list[tuple[int, int, str, int, int]]:
    text = "".join(p.read_text() for p in sorted((run_dir / "logs").glob("*.out")))
    return [(int(r), int(w), h, int(s), int(e)) for r, w, h, s, e in RANK_LINE.findall(text)]


def _check_allreduce(run_dir: Path, world: int, hosts: set[str]) -> None:
    ranks = _rank_lines(run_dir)
    assert sorted(r[0] for r in ranks) == list(range(world)), ranks
    expected = world * (world + 1) // 2
    assert {(w, s, e) for _, w, _, s, e in ranks} == {(world, expected, expected)}
    assert {h for _, _, h, _, _ in ranks} == hosts
    logs = "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))
    assert f"allreduce OK: world_size={world} sum={expected}" in logs


def test_torchrun_on_four_nodes_rendezvous_and_allreduce(cli: CK) -> None:
    run_dir = cli.runs / "torchrun4"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "4", "--launcher", "torchrun",
               "--out", str(run_dir), "--wait", "--", "python", "examples/allreduce.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _submitted_id(proc.stdout)
    assert f"Job {job} COMPLETED (exit code 0)" in proc.stdout
    # 4 nodes x 8 (fake) GPUs = 32 ranks, 8 per node, all agreeing on 1+2+...+32
    _check_allreduce(run_dir, 32, {"node1", "node2", "node3", "node4"})
    per_node = {}
    for _, _, host, _, _ in _rank_lines(run_dir):
        per_node[host] = per_node.get(host, 0) + 1
    assert per_node == {f"node{i}": 8 for i in range(1, 5)}
    # torchrun --tee: each rank's line on its node's log prefixed with its global rank, and in its
    # own file, in the run's logs per job, restart and node
    logs = "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))
    prefixed = re.findall(r"^\[rank(\d+)\]: allreduce rank (\d+)/32 ", logs, re.M)
    assert len(prefixed) == 32 and all(a == b for a, b in prefixed), logs[-2000:]
    kept = sorted((run_dir / "logs" / f"torchrun-{job}.r0").glob("node*/*/attempt_0/*/stdout.log"))
    assert sorted({p.parts[-5] for p in kept}) == [f"node{i}" for i in range(1, 5)] and len(kept) == 32, kept
    assert all(re.match(r"allreduce rank \d+/32 on node\d", p.read_text()) for p in kept)
    # one truth: Slurm holds exactly the rendered job.sbatch, byte for byte
    held = cli.bed.run("scontrol", "write", "batch_script", job, "-").stdout
    assert held == (run_dir / "job.sbatch").read_text()
    assert (run_dir / f"{job}_submission.sh").read_bytes() == (run_dir / "job.sbatch").read_bytes()
    # and the record says what ran where
    (record,) = cli.records()
    data = json.loads(record.read_text())
    assert (data["version"], data["job_id"], data["site"], data["stage"], data["launcher"]) == (
        1, job, "testbed", "multi-node", "torchrun")
    assert data["run_dir"] == str(run_dir) and data["state"] == "COMPLETED" and data["exit_code"] == 0


def test_srun_launcher_one_task_per_gpu(cli: CK) -> None:
    run_dir = cli.runs / "srun"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "2",
               "--launcher", "srun", "--out", str(run_dir), "--wait", "--", "python", "examples/allreduce.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _submitted_id(proc.stdout)
    # srun writes one log per rank and restart: logs/<job>.r<restart>.rank<N>.out
    assert sorted(p.name for p in (run_dir / "logs").glob(f"{job}.r0.rank*.out")) == [
        f"{job}.r0.rank{i}.out" for i in range(4)]
    _check_allreduce(run_dir, 4, {"node1", "node2"})


def _node_logs(run_dir: Path, job: str) -> str:
    return "".join(p.read_text() for p in sorted((run_dir / "logs").glob(f"{job}.r*.node*.out")))


def test_deepspeed_no_ssh_hostfile_from_the_allocation(cli: CK) -> None:
    """The real deepspeed runner on each node (--no_ssh), reading the hostfile the job wrote from
    the allocation: 2 nodes with node2 and node4 excluded must be node1 and node3, 2 slots each."""
    run_dir = cli.runs / "ds"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "2",
               "--launcher", "deepspeed", "--exclude", "node[2,4]", "--out", str(run_dir), "--wait",
               "--", "python", "examples/allreduce.py", env=cli.env(DS_ACCELERATOR="cpu"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _submitted_id(proc.stdout)
    assert (run_dir / "hostfile").read_text() == "node1 slots=2\nnode3 slots=2\n"
    _check_allreduce(run_dir, 4, {"node1", "node3"})
    logs = _node_logs(run_dir, job)
    # deepspeed's own runner resolved the world and started its per-node launcher
    assert logs.count("deepspeed.launcher.launch") >= 2, logs[-3000:]
    assert "'node1': [0, 1], 'node3': [0, 1]" in logs, logs[-3000:]


def test_deepspeed_exclude_slots_shrinks_the_world(cli: CK) -> None:
    """exclude_slots=node1:1: 3 ranks (node1 slot 0, node2 slots 0-1), ds_config's batch from 3."""
    run_dir = cli.runs / "ds-exclude"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "2",
               "--launcher", "deepspeed", "--exclude", "node[3-4]", "--set", "exclude_slots=node1:1",
               "--set", "micro_batch=2",
               "--out", str(run_dir), "--wait", "--", "python", "examples/allreduce.py",
               env=cli.env(DS_ACCELERATOR="cpu"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _submitted_id(proc.stdout)
    _check_allreduce(run_dir, 3, {"node1", "node2"})
    assert json.loads((run_dir / "ds_config.json").read_text())["train_batch_size"] == 6
    assert "'node1': [0], 'node2': [0, 1]" in _node_logs(run_dir, job)


def test_deepspeed_exclude_slots_naming_a_host_outside_the_allocation_fails_clearly(cli: CK) -> None:
    """node4 is a site node but drained, so Slurm allocates others: the job script stops before
    deepspeed starts (which would otherwise raise on every node)."""
    cli.bed.run("scontrol", "update", "NodeName=node4", "State=DRAIN", "Reason=clusterkit-test")
    try:
        run_dir = cli.runs / "ds-elsewhere"
        proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "2",
                   "--launcher", "deepspeed", "--set", "exclude_slots=node4:1",
                   "--out", str(run_dir), "--wait", "--", "python", "examples/allreduce.py")
    finally:
        cli.bed.resume("node4")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    job = _submitted_id(proc.stdout)
    log = (run_dir / "logs" / f"slurm-{job}.out").read_text()
    assert "clusterkit: error: deepspeed exclude_slots node4:1: host node4 is not among the allocated nodes" in log
    assert not list((run_dir / "logs").glob(f"{job}.r*.node*.out"))      # the launcher never started


def test_trainer_style_script_owns_deepspeed_path(cli: CK, tmp_path: Path) -> None:
    """transformers' HfArgumentParser/TrainingArguments parse --deepspeed PATH and --local_rank=N;
    the config is the user's (batch sizes 'auto', as HF configs have): clusterkit adds no flag."""
    pytest.importorskip("transformers", reason="transformers is in the test extra")
    config = tmp_path / "hf_ds.json"
    config.write_text(json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                                  "zero_optimization": {"stage": 2}}))
    run_dir = cli.runs / "hf"
    # one rank per node: each rank imports transformers and deepspeed, heavy on a small CI machine
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--launcher", "deepspeed", "--exclude", "node[3-4]", "--out", str(run_dir), "--wait",
               "--", "python", "examples/hf_deepspeed.py", "--output_dir", str(tmp_path / "out"), "--use_cpu",
               "--report_to", "none", "--deepspeed", str(config), env=cli.env(DS_ACCELERATOR="cpu"), timeout=560)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _submitted_id(proc.stdout)
    _check_allreduce(run_dir, 2, {"node1", "node2"})
    logs = _node_logs(run_dir, job)
    seen = re.findall(r"^hf_deepspeed rank (\d): --deepspeed (\S+) stage=2 local_rank=(\d)$", logs, re.M)
    assert sorted(seen) == [(str(r), str(config), "0") for r in range(2)], logs[-3000:]
    assert not (run_dir / "ds_config.json").exists()


def test_accelerate_launch_per_node(cli: CK) -> None:
    run_dir = cli.runs / "accelerate"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "2",
               "--launcher", "accelerate", "--exclude", "node[3-4]", "--out", str(run_dir), "--wait",
               "--", "python", "examples/allreduce.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _check_allreduce(run_dir, 4, {"node1", "node2"})


def test_megatron_shaped_torchrun(cli: CK) -> None:
    """megatron: torchrun per node with the parallel sizes appended to the script's argv."""
    run_dir = cli.runs / "megatron"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "2",
               "--launcher", "megatron", "--set", "tp=2", "--exclude", "node[3-4]", "--out", str(run_dir), "--wait",
               "--", "python", "examples/allreduce.py", "--seq-length", "128")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _check_allreduce(run_dir, 4, {"node1", "node2"})
    plan = json.loads((run_dir / "plan.json").read_text())
    args = plan["launch"]["command"]
    for flag, value in (("--tensor-model-parallel-size", "2"), ("--pipeline-model-parallel-size", "1"),
                        ("--micro-batch-size", "1"), ("--global-batch-size", "2")):
        assert args[args.index(flag) + 1] == value, args


def test_single_node_job(cli: CK) -> None:
    run_dir = cli.runs / "single"
    proc = cli("submit", "--site", "testbed", "--stage", "single-node", "--gpus-per-node", "3",
               "--out", str(run_dir), "--wait", "--", "python", "examples/allreduce.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = _rank_lines(run_dir)
    assert sorted(r[0] for r in ranks) == [0, 1, 2] and len({r[2] for r in ranks}) == 1
    assert "allreduce OK: world_size=3 sum=6" in proc.stdout  # --wait prints the log tails


def test_failing_job_is_failed_with_exit_code_and_log_tail(cli: CK) -> None:
    run_dir = cli.runs / "fail"
    proc = cli("submit", "--site", "testbed", "--stage", "single-node", "--gpus-per-node", "1",
               "--launcher", "srun", "--out", str(run_dir), "--wait",
               "--", "bash", "-c", "echo step one done; echo about to fail >&2; exit 3")
    assert proc.returncode == 3, proc.stdout + proc.stderr  # --wait returns the job's exit status
    job = _submitted_id(proc.stdout)
    assert f"Job {job} FAILED (exit code 3)" in proc.stdout
    st = cli.status(job)
    assert (st["state"], st["exit_code"]) == ("FAILED", 3)
    tails = "\n".join(line for log in st["logs"] for line in log["tail"])
    assert "about to fail" in tails and "step one done" in tails
    human = cli("status", job)
    assert human.returncode == 0
    assert f"job {job} FAILED, exit code 3" in human.stdout and "about to fail" in human.stdout


def test_submit_follow_prints_every_rank_s_log_and_exits_with_the_job_s_status(cli: CK) -> None:
    run_dir = cli.runs / "follow"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--launcher", "srun", "--out", str(run_dir), "--follow", "--",
               # rank 1 prints both lines and has ended before rank 0 fails with 5: a task failing
               # while the other still runs has srun's --kill-on-bad-exit end that one mid-way.  Rank 1
               # leaves its process id; rank 0 waits until that process is gone (the testbed's nodes
               # share this machine's process table), not a guess of how long it takes.  One file per
               # launch step: the supervisor relaunches once (doctor finds no cause), and the
               # relaunch's rank 0 must not read the first launch's file
               "bash", "-c", "echo step one on $(hostname); sleep 1; echo step two on $(hostname); "
               'd="$CK_RUN_DIR/done.$SLURM_STEP_ID"; '
               'if [ "$SLURM_PROCID" = 0 ]; then for i in $(seq 600); do [ -e "$d" ] && break; '
               'sleep 0.1; done; p=$(cat "$d"); for i in $(seq 600); do kill -0 "$p" 2>/dev/null '
               '|| break; sleep 0.1; done; exit 5; fi; echo $$ > "$d.tmp"; mv "$d.tmp" "$d"')
    job = _submitted_id(proc.stdout)
    assert proc.returncode == 5, proc.stdout + proc.stderr
    for node in ("node1", "node2"):
        assert f"step one on {node}" in proc.stdout and f"step two on {node}" in proc.stdout
    assert f"==> {run_dir}/logs/{job}.r0.rank0.out <==" in proc.stdout
    # the job's end, then (a failed job) doctor's cause and where to read more, last
    last = proc.stdout.rstrip().splitlines()
    assert f"Job {job} FAILED (exit code 5)" in last[-3:], proc.stdout
    assert last[-1] == f"  why in full: clusterkit doctor {job}", proc.stdout
    assert cli.status(job)["state"] == "FAILED"


def test_status_logs_and_cancel_of_a_running_job(cli: CK) -> None:
    run_dir = cli.runs / "sleeper"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--launcher", "srun", "--out", str(run_dir), "--",
               "bash", "-c", "echo started on $(hostname); sleep 300")
    assert proc.returncode == 0, proc.stderr
    job = _submitted_id(proc.stdout)
    follower = cli.popen("logs", job, "--follow")
    st = cli.wait_for(job, lambda s: s["state"] == "RUNNING")
    assert st["node_list"] == "node[1-2]" and st["exit_code"] is None
    table = cli("status", "--all")
    assert re.search(rf"^.*{job} .*RUNNING.*$", table.stdout, re.M), table.stdout
    cli.wait_for(job, lambda s: len(list((run_dir / "logs").glob(f"{job}.r0.rank*.out"))) == 2
                 and all("started" in p.read_text() for p in (run_dir / "logs").glob(f"{job}.r0.rank*.out")),
                 what="both nodes' logs")
    cancelled = cli("cancel", job)
    assert cancelled.returncode == 0 and f"Cancelled job {job} (was RUNNING)" in cancelled.stdout
    st = cli.wait_for(job, lambda s: s["state"] == "CANCELLED")
    out, err = follower.communicate(timeout=60)  # --follow ends with the job
    assert follower.returncode == 0, err
    assert "started on node1" in out and "started on node2" in out
    again = cli("cancel", job)
    assert again.returncode == 0 and "already ended (CANCELLED)" in again.stdout
    logs = cli("logs", job)
    assert f"==> {run_dir}/logs/slurm-{job}.out <==" in logs.stdout


def test_job_killed_without_result_file_does_not_hang_wait(cli: CK) -> None:
    """SIGKILL gives the script no chance to write its result file: --wait must still end."""
    run_dir = cli.runs / "killed"
    waiter = cli.popen("submit", "--site", "testbed", "--stage", "single-node", "--gpus-per-node", "1",
                       "--launcher", "srun", "--out", str(run_dir), "--wait", "--", "sleep", "300")
    job = None
    deadline = time.monotonic() + 180   # a bound only a submit that never records reaches
    while job is None and time.monotonic() < deadline and waiter.poll() is None:
        recs = cli.records()
        if recs:
            job = json.loads(recs[0].read_text())["job_id"]
            break
        time.sleep(0.25)
    assert job, "no record appeared"
    cli.wait_for(job, lambda s: s["state"] == "RUNNING")
    cli.bed.run("scancel", "--batch", "--signal=KILL", job)
    out, err = waiter.communicate(timeout=90)
    assert waiter.returncode != 0
    assert not (run_dir / f"{job}.result").exists()
    assert re.search(rf"Job {job} (CANCELLED|FAILED)", out), out + err


def test_preempted_job_is_requeued_until_the_budget_is_spent(cli: CK) -> None:
    """USR2 to the batch shell (what --signal=B:USR2@T does) -> requeue; testbed budget: 2 restarts."""
    run_dir = cli.runs / "preempt"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--launcher", "srun", "--out", str(run_dir), "--",
               "bash", "-c", 'echo "run ${SLURM_RESTART_COUNT:-0} on $(hostname)"; sleep 300')
    assert proc.returncode == 0, proc.stderr
    job = _submitted_id(proc.stdout)
    log = run_dir / "logs" / f"slurm-{job}.out"
    for restart in range(3):
        cli.wait_for(job, lambda s, restart=restart: s["state"] == "RUNNING" and (s["restarts"] or 0) == restart,
                     what=f"RUNNING after {restart} restarts")
        cli.wait_for(job, lambda s, restart=restart: f"(restart {restart} of at most 2)" in log.read_text(),
                     what="job start")
        cli.bed.run("scancel", "--batch", "--signal=USR2", job)
        if restart < 2:
            cli.wait_for(job, lambda s, restart=restart: s["state"] == "PENDING" and s["restarts"] == restart + 1,
                         what="requeue")
            # Slurm holds a requeued job ~2 minutes before it is eligible again; release it now.
            # Not within the same second as the requeue: slurmd revokes the old run's job
            # credential with 1 s resolution, and a restart stamped in that second is refused
            # ("Job credential revoked") and recorded as FAILED. The hold exists to avoid that.
            time.sleep(1.2)
            cli.bed.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    st = cli.wait_for(job, lambda s: s["state"] in ("FAILED", "COMPLETED", "CANCELLED"), what="the end")
    assert st["state"] == "FAILED" and st["restarts"] == 2, st
    text = log.read_text()
    assert "requeueing (restart 1 of 2)" in text and "requeueing (restart 2 of 2)" in text
    assert "budget of 2 restarts is spent: not requeueing" in text
    node_logs = "".join(p.read_text() for p in (run_dir / "logs").glob(f"{job}.r*.rank*.out"))
    assert all(f"run {n} on node1" in node_logs for n in range(3)), node_logs
