"""``status JOB --run`` on the Slurm testbed: a 2-node job's GPU-hours are what Slurm's
accounting (slurmdbd, the real sacct) says: ``ElapsedRaw`` x the ``gres/gpu`` of ``AllocTRES``,
read here by the test itself; its steps are the job's own progress line."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.progress.account_job import STEPS

from .conftest import CK


def _accounted(cli: CK, job: str, timeout: float = 60) -> list[tuple[int, int, str]]:
    """(ElapsedRaw, GPUs, State) of each run of ``job`` once slurmdbd has every end and the
    last run COMPLETED."""
    deadline = time.monotonic() + timeout
    rows: list[tuple[int, int, str]] = []
    ends: list[str] = []
    while time.monotonic() < deadline:
        out = cli.bed.run("sacct", "-X", "-D", "-P", "-n", "-j", job, "-o", "ElapsedRaw,AllocTRES,End,State").stdout
        rows, ends = [], []
        for line in out.splitlines():
            elapsed, tres, end, state = line.split("|")
            m = re.search(r"(?:^|,)gres/gpu=(\d+)", tres)
            rows.append((int(elapsed), int(m.group(1)) if m else 0, state.split()[0]))
            ends.append(end)
        if rows and rows[-1][2] == "COMPLETED" and all(e and e != "Unknown" for e in ends):
            return rows
        time.sleep(0.5)
    raise AssertionError(f"sacct has no end for job {job} in {timeout}s: {rows} {ends}")


def test_gpu_hours_of_a_two_node_job_are_sacct_s(cli: CK) -> None:
    cli.bed.wait_idle()
    proc = cli("submit", "--site", "testbed", "--launcher", "srun", "--nodes", "2", "--gpus-per-node", "2",
               "--set", "cpus_per_task=1", "--job-name", "acct2", "--out", str(cli.runs / "acct2"), "--json",
               "--", "python", "tests/progress/account_job.py")
    assert proc.code == 0, proc.err
    job = json.loads(proc.out)["job_id"]
    cli.wait_for(job, lambda s: s["state"] == "COMPLETED", timeout=180, what="COMPLETED")
    rows = _accounted(cli, job)
    assert [g for _, g, _ in rows] == [4]                    # 2 nodes x 2 GPUs, one run

    got = cli("status", job, "--run", "--json", timeout=60)
    assert got.code == 0, got.err
    run = json.loads(got.out)["run"]
    assert run["sources"] == ["sacct"] and run["jobs"] == [job]
    assert run["gpu_hours"] == pytest.approx(sum(e * g for e, g, _ in rows) / 3600) and run["gpu_hours"] > 0
    assert run["allocated_s"] == sum(e for e, _, _ in rows) >= 0
    assert run["steps"] == STEPS and run["requeues"] == 0
    (alloc,) = run["allocations"]
    assert alloc["gpus"] == 4 and alloc["state"] == "COMPLETED"
    assert run["wall_s"] >= run["allocated_s"] and run["waiting_s"] >= 0
    text = cli("status", job, "--run", timeout=60)
    assert text.code == 0, text.err
    assert f"Run acct2-{job}: 1 job(s), 1 allocation(s)" in text.out and f"step {STEPS}" in text.out, text.out
    print(text.out)   # docs/jobs.md shows this output


def test_a_chain_is_one_run_and_its_gpu_hours_add_up(cli: CK) -> None:
    cli.bed.wait_idle()
    proc = cli("submit", "--site", "testbed", "--launcher", "srun", "--gpus-per-node", "1",
               "--set", "cpus_per_task=1", "--job-name", "acctchain", "--chain", "2",
               "--out", str(cli.runs / "acctchain"), "--json", "--", "python", "tests/progress/account_job.py")
    assert proc.code == 0, proc.err
    ids = [m["job_id"] for m in json.loads(proc.out)["chain"]]
    for job in ids:
        cli.wait_for(job, lambda s: s["state"] == "COMPLETED", timeout=180, what="COMPLETED")
    rows = [r for job in ids for r in _accounted(cli, job)]
    got = cli("status", ids[0], "--run", "--json", timeout=60)
    assert got.code == 0, got.err
    run = json.loads(got.out)["run"]
    assert run["jobs"] == ids and run["allocation_count"] == 2 and run["requeues"] == 0
    assert run["gpu_hours"] == pytest.approx(sum(e * g for e, g, _ in rows) / 3600)
    assert [a["gpus"] for a in run["allocations"]] == [1, 1]
    # the second member waited for the first: wall time covers both allocations and the gap
    assert run["wall_s"] >= run["allocated_s"] and run["steps"] == STEPS
    assert json.loads(cli("status", ids[1], "--run", "--json", timeout=60).out)["run"]["jobs"] == ids
    print(cli("status", ids[1], "--run", timeout=60).out)


def test_a_requeue_is_counted_lost_with_the_allocation_sacct_gives_it(cli: CK) -> None:
    cli.bed.wait_idle()
    go = cli.runs / "acctrq-go"
    proc = cli("submit", "--site", "testbed", "--launcher", "srun", "--gpus-per-node", "2",
               "--set", "cpus_per_task=1", "--job-name", "acctrq", "--out", str(cli.runs / "acctrq"), "--json",
               # held after step 5 until the test has requeued it: still running when the requeue comes
               "--", "python", "tests/progress/account_job.py", "0.25", str(go))
    assert proc.code == 0, proc.err
    job = json.loads(proc.out)["job_id"]
    try:
        cli.wait_for(job, lambda s: (s.get("progress") or {}).get("step", 0) >= 2, timeout=120, what="step 2")
        cli.bed.run("scontrol", "requeue", job)
        cli.wait_for(job, lambda s: s["state"] == "PENDING" and s["restarts"] == 1, timeout=120, what="requeued")
    finally:
        go.touch()
    time.sleep(1.2)   # as tests/slurm/test_preemption.py's release: not within the second of the requeue
    cli.bed.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    cli.wait_for(job, lambda s: s["state"] == "COMPLETED", timeout=180, what="COMPLETED")
    rows = _accounted(cli, job)
    assert len(rows) == 2 and rows[0][2] != "COMPLETED", rows       # the requeued run, then the one kept
    run = json.loads(cli("status", job, "--run", "--json", timeout=60).out)["run"]
    assert run["requeues"] == 1 and run["requeued_s"] == rows[0][0]
    assert run["requeued_gpu_hours"] == pytest.approx(rows[0][0] * rows[0][1] / 3600)
    assert run["gpu_hours"] == pytest.approx(sum(e * g for e, g, _ in rows) / 3600)
    assert run["kept_s"] == rows[1][0] and run["steps"] == STEPS
    # the requeue's wait (held, then released) is time without an allocation
    assert run["waiting_s"] >= 1 and run["goodput"] < 1
    print(cli("status", job, "--run", timeout=60).out)


def test_a_chain_of_three_with_a_requeue_is_one_tagged_run_that_lost_the_time_since_its_checkpoint(
        cli: CK) -> None:
    """Three chained jobs (account_job.py: a checkpoint save at step 4 of 8, 1 s apart); the second
    is requeued after its save: Slurm's accounting groups the three by their run tag, the run's
    GPU-hours are sacct's, and what it lost is from that save to the requeue's end in sacct."""
    cli.bed.wait_idle()
    proc = cli("submit", "--site", "testbed", "--launcher", "srun", "--gpus-per-node", "1",
               "--set", "cpus_per_task=1", "--job-name", "acct3", "--chain", "3",
               "--out", str(cli.runs / "acct3"), "--json", "--", "python", "tests/progress/account_job.py", "1",
               str(cli.runs / "acct3-go.%j"))   # each member holds after step 5 until its file is there
    assert proc.code == 0, proc.err
    chain = json.loads(proc.out)["chain"]
    ids, name = [m["job_id"] for m in chain], chain[0]["run_name"]
    second = ids[1]
    for job in (ids[0], ids[2]):
        (cli.runs / f"acct3-go.{job}").touch()
    try:   # the second is held after its step 5 until the test has requeued it
        cli.wait_for(second, lambda s: (s.get("progress") or {}).get("step", 0) >= 5, timeout=120, what="step 5")
        cli.bed.run("scontrol", "requeue", second)
        cli.wait_for(second, lambda s: s["state"] == "PENDING" and s["restarts"] == 1, timeout=120, what="requeued")
    finally:
        (cli.runs / f"acct3-go.{second}").touch()
    time.sleep(1.2)   # as tests/slurm/test_preemption.py's release: not within the second of the requeue
    cli.bed.run("scontrol", "update", f"JobId={second}", "StartTime=now")
    for job in ids:
        cli.wait_for(job, lambda s: s["state"] == "COMPLETED", timeout=180, what="COMPLETED")
    rows = {job: _accounted(cli, job) for job in ids}
    # every job of the run, the first one too (tagged once sbatch gave its id), carries the tag
    tags = cli.bed.run("sacct", "-X", "-n", "-P", "-j", ",".join(ids), "-o", "JobIDRaw,Comment").stdout
    assert sorted(tags.split()) == sorted(f"{j}|clusterkit-run:{name}" for j in ids), tags

    got = cli("status", name, "--run", "--json", timeout=60)      # the run by its name
    assert got.code == 0, got.err
    assert "no run tag" not in got.err, got.err
    run = json.loads(got.out)["run"]
    assert run["jobs"] == ids and run["allocation_count"] == 4 and run["requeues"] == 1
    assert run["gpu_hours"] == pytest.approx(sum(e * g for r in rows.values() for e, g, _ in r) / 3600)
    (failure,) = run["causes"]["failures"]
    marks = (Path(chain[1]["run_dir"]) / "logs" / f"{second}.progress.log").read_text().split("\n")
    save = float(next(m for m in marks if m.endswith("phase=save")).split()[1].removeprefix("time="))
    requeued_end = run["allocations"][1]["end"]
    assert failure["job_id"] == second and failure["restart"] == 0 and failure["time"] == requeued_end
    assert failure["checkpoint"] == pytest.approx(save)
    # step 5 came 1 s after the save, before the requeue; sacct's End is whole seconds, so what
    # was lost reads from just over 0 s (a CI run: 0.379 s), never 0 or less
    assert failure["lost_s"] == pytest.approx(requeued_end - save) and failure["lost_s"] > 0
    c = run["causes"]
    assert c["lost_s"] == failure["lost_s"] and c["recovery_s"] > 0 and 0 < c["ettr"] < 1
    # no supervisor judged the requeued run: status --run asked doctor about its logs itself
    assert failure["judged_by"] == "doctor" and failure["verdict"] and not failure["not_judged"], failure
    print(cli("status", name, "--run", timeout=60).out)   # docs/jobs.md shows this output
