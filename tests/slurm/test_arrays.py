"""Job arrays and sweeps on the Slurm testbed, for real: one sbatch, a task per index.

``array_task.py`` is the task: it binds its ``CK_PORT`` on its node for as long as it trains,
checkpoints every step, and writes what it saw (index, sweep values, argv, port, start and end)
into its task folder; the tests compare the tasks' own records.  The preemption test runs
``train_standin.py`` (the preemption tests' stand-in) in each task and preempts one task for real
with a job in partition ``high`` pinned to that task's nodes.
"""

from __future__ import annotations

import json
import os
import pwd
import time
from pathlib import Path

from .conftest import CK, REPO

#: the user the jobs run as: CK_CHECKPOINT_DIR is <storage>/checkpoints/<user>/<run name>
USER = pwd.getpwuid(os.getuid()).pw_name

TASK = "tests/slurm/array_task.py"
STANDIN = "tests/slurm/train_standin.py"


def _submit(cli: CK, run_dir: Path, *args: str) -> str:
    proc = cli("submit", "--site", "testbed", "--out", str(run_dir), "--json", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)["job_id"]


def _seen(run_dir: Path, count: int) -> list[dict]:
    got = [json.loads(p.read_text()) for p in sorted((run_dir / "tasks").glob("*/seen.json"))]
    assert len(got) == count, got
    return got


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most intervals open at one moment (an end at the same instant as a start closes first)."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_array_throttle_runs_at_most_two_tasks_each_with_its_folder_port_and_checkpoints(cli: CK) -> None:
    cli.bed.wait_idle()
    run_dir = cli.runs / "throttle"
    job = _submit(cli, run_dir, "--launcher", "srun", "--gpus-per-node", "1", "--set", "cpus_per_task=1",
                  "--array", "0-3%2", "--", "python", TASK, "--steps", "12")
    st = cli.wait_for(job, lambda s: s["state"] == "COMPLETED", timeout=240, what="all tasks COMPLETED")
    assert st["tasks"] == "4 COMPLETED" and [t["job_id"] for t in st["task_list"]] == [f"{job}_{i}" for i in range(4)]
    seen = _seen(run_dir, 4)
    assert sorted(s["index"] for s in seen) == ["0", "1", "2", "3"]
    assert sorted(s["job_id"] for s in seen) == [f"{job}_{i}" for i in range(4)]
    assert len({s["port"] for s in seen}) == 4, seen              # four ports: no two tasks share one
    assert len({s["checkpoint_dir"] for s in seen}) == 4, seen
    assert all(s["step"] == 12 and s["checkpoint_dir"].endswith(f"-{s['job_id']}") for s in seen), seen
    most = _most_at_once([(s["started"], s["ended"]) for s in seen])
    print(f"[figures] --array 0-3%2: at most {most} tasks trained at once (from the tasks' own stamps); "
          f"hosts {sorted(s['host'] for s in seen)}")
    assert most <= 2, seen
    # sacct agrees (whole seconds): Slurm never had three of the tasks running at once
    acct = cli.bed.run("sacct", "-X", "-n", "-P", "-j", job, "-o", "JobID,Start,End")
    rows = [line.split("|") for line in acct.stdout.split()]
    assert sorted(r[0] for r in rows) == [f"{job}_{i}" for i in range(4)], acct.stdout
    stamp = "%Y-%m-%dT%H:%M:%S"
    assert _most_at_once([(time.mktime(time.strptime(r[1], stamp)), time.mktime(time.strptime(r[2], stamp)))
                          for r in rows]) <= 2, acct.stdout
    # one row for the array in `status`, and a task's logs on their own
    listed = json.loads(cli("status", "--all", "--json").stdout)["jobs"]
    assert [r["tasks"] for r in listed if r["job_id"] == job] == ["4 COMPLETED"]
    one = cli("logs", f"{job}_2", "--json")
    assert one.returncode == 0, one.stderr
    names = [Path(f["path"]).name for f in json.loads(one.stdout)["files"]]
    assert f"slurm-{job}_2.out" in names and all(f"{job}_2" in n for n in names), names
    human = cli("status", job)
    print(f"[output] clusterkit status {job}\n{human.stdout}[output] clusterkit status\n{cli('status').stdout}")
    assert all(f"task {job}_{i} " in human.stdout for i in range(4)), human.stdout


def test_sweep_gives_each_task_its_values_in_env_and_argv(cli: CK) -> None:
    cli.bed.wait_idle()
    run_dir = cli.runs / "sweep"
    job = _submit(cli, run_dir, "--launcher", "srun", "--gpus-per-node", "1", "--set", "cpus_per_task=1",
                  "--sweep", "lr=0.1,0.2", "--sweep", "seed=1,2", "--",
                  "python", TASK, "--steps", "1", "--lr", "{lr}", "--name", "run-{seed}-{lr}")
    cli.wait_for(job, lambda s: s["state"] == "COMPLETED", timeout=240, what="all tasks COMPLETED")
    by_index = {s["index"]: s for s in _seen(run_dir, 4)}
    for index, (lr, seed) in enumerate([("0.1", "1"), ("0.1", "2"), ("0.2", "1"), ("0.2", "2")]):
        s = by_index[str(index)]
        assert s["sweep"] == {"CK_SWEEP_LR": lr, "CK_SWEEP_SEED": seed}, s
        assert s["argv"] == ["--steps", "1", "--lr", lr, "--name", f"run-{seed}-{lr}"], s


def test_preempting_one_array_task_requeues_that_task_only(cli: CK, tmp_path: Path) -> None:
    cli.bed.wait_idle()
    shared = tmp_path / "shared"
    shared.mkdir()
    site = tmp_path / "testbed-array.yaml"
    site.write_text(f"name: testbed-array\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\n"
                    f"storage:\n  - {{path: {shared}, type: local, shared: true, use: [checkpoints]}}\n"
                    f"  - {{path: {tmp_path}, type: local, shared: true}}\n")
    run_dir = cli.runs / "preempt"
    proc = cli("submit", "--site", str(site), "--out", str(run_dir), "--json", "--stage", "multi-node", "--nodes", "2",
               "--gpus-per-node", "1", "--launcher", "srun", "--set", "cpus_per_task=1", "--job-name", "arr",
               # whole nodes: each task on 2 of the 4, so a preemption of one task's nodes reaches it alone
               "--sbatch", "exclusive", "--array", "0-1", "--", "python", STANDIN)
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)["job_id"]
    try:
        _preempt_one_task(cli, job, shared)
    finally:
        cli.bed.run("scancel", job, check=False)


def _preempt_one_task(cli: CK, job: str, shared: Path) -> None:
    ckpt = {i: shared / "checkpoints" / USER / f"arr-{job}_{i}" for i in (0, 1)}   # the run name: job name and task id
    started = {i: ckpt[i] / "started.r1.n0.json" for i in (0, 1)}
    cli.wait_for(job, lambda s: all(p.exists() for p in started.values()), timeout=420, what="both tasks training")
    # the last task keeps the array's own job id in Slurm: a requeue by that id would take every task along
    nodes = cli.status(f"{job}_1")["node_list"]
    assert nodes != cli.status(f"{job}_0")["node_list"]
    raw = cli.bed.run("squeue", "-h", "-r", "-j", job, "-o", "%i=%A").stdout.split()
    print(f"[figures] array task -> Slurm's own job id: {raw}")
    cli.bed.run("sbatch", "--parsable", "-p", "high", "-N", "2", "-w", nodes, "--exclusive", "-o", "/dev/null",
                "--wrap", "sleep 1")
    cli.wait_for(f"{job}_1", lambda s: s["state"] == "PENDING" and s["restarts"] == 1, timeout=90,
                 what="task 1 requeued")
    saved = json.loads((ckpt[1] / "saved.r1.n0.json").read_text())
    assert saved["restart"] == 0, saved
    other = cli.status(f"{job}_0")
    assert other["state"] == "RUNNING" and not other["restarts"], other
    assert not (ckpt[0] / "saved.r0.n0.json").exists()
    time.sleep(1.2)   # see test_preemption: not within the second of the requeue
    cli.bed.run("scontrol", "update", f"JobId={job}_1", "StartTime=now")
    cli.wait_for(f"{job}_1", lambda s: s["state"] == "COMPLETED" and s["restarts"] == 1, timeout=420,
                 what="task 1 resumed and completed")
    resumed = json.loads((ckpt[1] / "started.r1.n1.json").read_text())
    assert resumed["resumed_step"] == saved["step"] > 0, (resumed, saved)
    assert not (ckpt[0] / "started.r0.n1.json").exists()     # task 0 was never restarted
    assert cli.status(f"{job}_0")["state"] == "RUNNING"
    # cancel one task: the ranks save, the task ends CANCELLED, the array's counts say so
    out = cli("cancel", f"{job}_0", "--json", timeout=120)
    assert out.returncode == 0 and json.loads(out.stdout)["cancelled"] is True, out.stdout + out.stderr
    st = cli.wait_for(job, lambda s: s["state"] in ("CANCELLED", "FAILED", "COMPLETED"), timeout=90, what="the end")
    assert sorted(st["tasks"].split(", ")) == ["1 CANCELLED", "1 COMPLETED"], st
    assert (ckpt[0] / "saved.r0.n0.json").exists()


def test_doctor_diagnoses_each_failed_task_and_groups_equal_verdicts(cli: CK) -> None:
    cli.bed.wait_idle()
    run_dir = cli.runs / "doctor"
    job = _submit(cli, run_dir, "--launcher", "srun", "--gpus-per-node", "1", "--set", "cpus_per_task=1",
                  "--sweep", "lr=0.1,0.2", "--sweep", "mode=ok,crash", "--",
                  "python", TASK, "--steps", "3", "--lr", "{lr}", "--mode", "{mode}")
    st = cli.wait_for(job, lambda s: s["state"] not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING"),
                      timeout=240, what="every task ended")
    assert st["state"] == "FAILED" and sorted(st["tasks"].split(", ")) == ["2 COMPLETED", "2 FAILED"], st
    failed = sorted(t["job_id"] for t in st["task_list"] if t["state"] == "FAILED")
    assert failed == [f"{job}_1", f"{job}_3"], st
    out = cli("doctor", job, "--json", timeout=120)
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    (group,) = report["array"]["groups"]
    assert group["tasks"] == failed and report["array"]["failed"] == 2, report["array"]
    assert "FloatingPointError" in json.dumps(report["verdict"]) or "nan" in json.dumps(report["verdict"]), report
    human = cli("doctor", job, timeout=120)
    print(f"[output] clusterkit doctor {job}\n{human.stdout}")
    assert f"2 task(s) ({job}_1, {job}_3): {group['category']}" in human.stdout, human.stdout
    one = cli("doctor", f"{job}_2", "--json", timeout=120)
    assert one.returncode == 0 and json.loads(one.stdout)["verdict"]["category"] == "ok", one.stdout + one.stderr


def test_cancel_of_the_array_lets_every_running_task_save_then_cancels_them_all(cli: CK) -> None:
    cli.bed.wait_idle()
    run_dir = cli.runs / "cancel"
    job = _submit(cli, run_dir, "--launcher", "srun", "--gpus-per-node", "1", "--set", "cpus_per_task=1",
                  # trains until cancelled, however late the last task starts
                  "--array", "0-2", "--", "python", TASK, "--steps", "100000")
    cli.wait_for(job, lambda s: s["tasks"] == "3 RUNNING" and len(
        list(Path("/tmp/checkpoints", USER).glob(f"ck-array_task-{job}_*/ckpt.json"))) == 3,
        timeout=240, what="3 tasks training")
    out = cli("cancel", job, "--json", timeout=120)
    assert out.returncode == 0, out.stderr
    done = json.loads(out.stdout)
    assert done["cancelled"] is True and done["state_before"] == "RUNNING", done
    st = cli.wait_for(job, lambda s: s["state"] == "CANCELLED", timeout=90, what="CANCELLED")
    assert st["tasks"] == "3 CANCELLED", st
    seen = _seen(run_dir, 3)    # each task's handler ran: it saved and wrote what it saw
    assert all(s["stopped"] and 0 < s["step"] < 100000 for s in seen), seen
