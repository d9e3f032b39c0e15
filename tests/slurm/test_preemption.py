"""Preemption, the time-limit warning and ``clusterkit cancel`` on the Slurm testbed, for real.

Every launcher that runs here (torchrun, srun, deepspeed, accelerate, megatron-shaped torchrun)
starts ``train_standin.py`` on 2 nodes x 2 (fake) GPUs.  The stand-in joins the world with a
gloo all-reduce, traps SIGTERM, "saves" for 2 s and writes a marker per rank and restart into
``$CK_CHECKPOINT_DIR``; after a requeue it resumes from its checkpoint.  A rank that got
SIGKILL (what srun does to its tasks when it is sent TERM) leaves no marker, so the tests fail.

The testbed's `debug` partition is preemptible (PreemptMode=REQUEUE, GraceTime=10 s); a job in
partition `high` pinned to all nodes preempts every job there.  Slurm holds requeued jobs a
while (BeginTime); the tests release them once the requeue is recorded.  Each event runs the
five launchers' jobs at once, and prints per launcher how many ranks saved and how long they
took (``pytest -s`` shows the table).

Where the versions differ: on Slurm 24.11 (24.05 and later) a job preempted once keeps the mark
(GRACE_PREEMPT) across its requeue, and Slurm requeues it again whenever its script ends later;
the job script sets Requeue=0 before its end for good, Slurm records that end PREEMPTED, and
``clusterkit status`` shows the script's result.  The same assertions (COMPLETED or FAILED, one
restart) hold on 22.05 and 24.11.
"""

from __future__ import annotations

import json
import os
import pwd
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from .conftest import CK, REPO

#: the user the jobs run as: CK_CHECKPOINT_DIR is <storage>/checkpoints/<user>/<run name>
USER = pwd.getpwuid(os.getuid()).pw_name

pytest.importorskip("torch", reason="the training stand-in joins a gloo world (pip install torch, CPU build)")

STANDIN = "tests/slurm/train_standin.py"
LAUNCHERS: dict[str, list[str]] = {
    "torchrun": [], "srun": [], "deepspeed": [], "accelerate": [], "megatron": ["--set", "tp=2"],
}
RANKS = 4          # 2 nodes x 2 GPUs
START_S = 420      # 20 python ranks and their launchers importing torch on a small shared machine


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """The testbed site with its checkpoint storage under tmp_path (shared: every node is this host)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    path = tmp_path / "testbed-preempt.yaml"
    path.write_text(f"name: testbed-preempt\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\n"
                    f"storage:\n  - {{path: {shared}, type: local, shared: true, use: [checkpoints]}}\n"
                    f"  - {{path: {tmp_path}, type: local, shared: true}}\n")   # the run directories
    return path


class Jobs:
    """One job per launcher, submitted together, with their checkpoint directories."""

    def __init__(self, cli: CK, site: Path, event: str, launchers: dict[str, list[str]], *extra: str,
                 script: tuple[str, ...] = (),
                 shape: tuple[str, ...] = ("--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "2")) -> None:
        self.cli, self.event = cli, event
        self.ids: dict[str, str] = {}
        for name, args in launchers.items():
            proc = cli("submit", "--site", str(site), *shape, "--launcher", name, *args, "--set", "cpus_per_task=1",
                       *extra, "--job-name", f"{event}-{name}", "--out", str(cli.runs / f"{event}-{name}"),
                       "--json", "--", "python", STANDIN, *script)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            self.ids[name] = json.loads(proc.stdout)["job_id"]
        # no --run-name: each job's run is its name and job id
        self.dirs = {n: site.parent / "shared" / "checkpoints" / USER / f"{event}-{n}-{j}" for n, j in self.ids.items()}

    def markers(self, kind: str, restart: int | None = None) -> dict[str, list[dict[str, Any]]]:
        pattern = f"{kind}.r*.n{restart}.json" if restart is not None else f"{kind}.r*.json"
        return {n: [json.loads(p.read_text()) for p in sorted(d.glob(pattern))] for n, d in self.dirs.items()}

    def wait_markers(self, kind: str, restart: int | None, timeout: float) -> dict[str, list[dict[str, Any]]]:
        deadline = time.monotonic() + timeout
        while True:
            got = self.markers(kind, restart)
            if all(len(m) == RANKS for m in got.values()):
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.event}: {kind} markers (restart {restart}) not all there after "
                                     f"{timeout:.0f}s: { {n: len(m) for n, m in got.items()} }\n{self.logs()}")
            time.sleep(1)

    def wait_state(self, predicate: Any, what: str, timeout: float = 120) -> None:
        for name, job in self.ids.items():
            self.cli.wait_for(job, predicate, timeout=timeout, what=f"{name}: {what}")

    def release(self) -> None:
        # Not within the second of the requeue: slurmd revokes the old run's credential with
        # 1 s resolution, and a restart stamped in that second fails ("Job credential revoked").
        time.sleep(1.2)
        for job in self.ids.values():
            self.cli.bed.run("scontrol", "update", f"JobId={job}", "StartTime=now")

    def logs(self) -> str:
        out = []
        for name in self.ids:
            for p in sorted((self.cli.runs / f"{self.event}-{name}" / "logs").glob("slurm-*.out")):
                out.append(f"--- {name} {p.name}\n" + "\n".join(p.read_text().splitlines()[-15:]))
        return "\n".join(out)


def _figures(event: str, saved: dict[str, list[dict[str, Any]]], window: str) -> None:
    for name, marks in saved.items():
        took = [m["saved_at"] - m["term_at"] for m in marks]
        print(f"[figures] {event:<9} {name:<10} {len(marks)}/{RANKS} ranks saved; save took "
              f"{min(took):.2f}-{max(took):.2f} s; {window}")


def _check_saved(saved: dict[str, list[dict[str, Any]]], restart: int) -> None:
    for name, marks in saved.items():
        assert sorted(m["rank"] for m in marks) == list(range(RANKS)), (name, marks)
        assert all(m["restart"] == restart and m["saved_at"] - m["term_at"] >= 1.9 for m in marks), (name, marks)


def _check_resumed(jobs: Jobs) -> None:
    saved = jobs.markers("saved", 0)
    started = jobs.wait_markers("started", 1, START_S)
    for name in jobs.ids:
        at = {m["rank"]: m["step"] for m in saved[name]}
        assert {m["rank"]: m["resumed_step"] for m in started[name]} == at, (name, started[name], at)
    jobs.wait_markers("done", None, 120)
    jobs.wait_state(lambda s: s["state"] == "COMPLETED" and s["exit_code"] == 0 and s["restarts"] == 1,
                    "COMPLETED after one restart")


def _script_ended(cli: CK, job: str) -> bool:
    """Slurm's accounting has the job's batch step (its script) ended."""
    rows = cli.bed.run("sacct", "-n", "-P", "-j", f"{job}.batch", "-o", "State", check=False).stdout.split()
    return bool(rows) and not {"RUNNING", "PENDING", "REQUEUED"} & set(rows)


def _preempt(cli: CK) -> None:
    """A job in partition high pinned to every node preempts every job in debug."""
    cli.bed.run("sbatch", "--parsable", "-p", "high", "-N", "4", "-w", "node[1-4]", "--exclusive",
                "-o", "/dev/null", "--wrap", "sleep 1")


def _every_rank_saves_and_is_requeued(cli: CK, site: Path, event: str, label: str, send: Callable[[Jobs], None],
                                      window: str, requeue_timeout: float = 120) -> Jobs:
    """One job per launcher; once they run, ``send`` the event: every rank saves and every job is
    requeued (restart 1).  Prints the figures under ``label``; the jobs are still held."""
    cli.bed.wait_idle()
    jobs = Jobs(cli, site, event, LAUNCHERS)
    jobs.wait_markers("started", 0, START_S)
    send(jobs)
    saved = jobs.wait_markers("saved", 0, 60)
    _check_saved(saved, 0)
    jobs.wait_state(lambda s: s["state"] == "PENDING" and s["restarts"] == 1, "requeued", timeout=requeue_timeout)
    _figures(label, saved, window)
    return jobs


def test_time_limit_warning_every_rank_saves_then_the_job_resumes(cli: CK, site: Path) -> None:
    """USR2 to the batch shell is what --signal=B:USR2@T does before the time limit."""
    def warn(jobs: Jobs) -> None:
        for job in jobs.ids.values():
            cli.bed.run("scancel", "--batch", "--signal=USR2", job)

    jobs = _every_rank_saves_and_is_requeued(cli, site, "warn", "warning", warn,
                                             "window: scheduler.grace_s = 30 s before the script requeues")
    for name in jobs.ids:
        log = (cli.runs / f"warn-{name}" / "logs" / f"slurm-{jobs.ids[name]}.out").read_text()
        assert "SIGTERM to every rank" in log and "requeueing (restart 1 of 2)" in log, log
        assert not (cli.runs / f"warn-{name}" / f"{jobs.ids[name]}.result").exists()
    jobs.release()
    _check_resumed(jobs)


def test_a_single_node_job_gets_the_warning_saves_and_resumes(cli: CK, site: Path) -> None:
    """Every Slurm stage requeues: one node with 4 GPUs (the stage follows --nodes 1) is warned,
    every rank saves, the job requeues itself and resumes from the saved step."""
    cli.bed.wait_idle()
    jobs = Jobs(cli, site, "single", {"torchrun": []}, shape=("--nodes", "1", "--gpus-per-node", "4"))
    (job,) = jobs.ids.values()
    jobs.wait_markers("started", 0, START_S)
    cli.bed.run("scancel", "--batch", "--signal=USR2", job)
    _check_saved(jobs.wait_markers("saved", 0, 60), 0)
    jobs.wait_state(lambda s: s["state"] == "PENDING" and s["restarts"] == 1, "requeued")
    log = (cli.runs / "single-torchrun" / "logs" / f"slurm-{job}.out").read_text()
    assert "(restart 0 of at most 2)" in log and "requeueing (restart 1 of 2)" in log, log
    jobs.release()
    _check_resumed(jobs)


def test_preemption_by_the_high_partition_every_rank_saves_then_the_job_resumes(cli: CK, site: Path) -> None:
    # never COMPLETED: requeued (by Slurm after the grace time, or by the script at once)
    jobs = _every_rank_saves_and_is_requeued(
        cli, site, "preempt", "preempt", lambda _jobs: _preempt(cli),
        "window: GraceTime 10 s + KillWait 5 s (Slurm's), whichever the script does not cut short", requeue_timeout=90)
    for name, job in jobs.ids.items():
        assert not (cli.runs / f"preempt-{name}" / f"{job}.result").exists(), name
    jobs.release()
    _check_resumed(jobs)


def test_cancel_lets_every_rank_save_and_never_requeues(cli: CK, site: Path) -> None:
    cli.bed.wait_idle()
    jobs = Jobs(cli, site, "cancel", LAUNCHERS)
    jobs.wait_markers("started", 0, START_S)
    with ThreadPoolExecutor(max_workers=len(jobs.ids)) as pool:
        procs = dict(zip(jobs.ids, pool.map(lambda j: cli("cancel", j, "--json", timeout=120), jobs.ids.values()),
                         strict=True))
    for proc in procs.values():
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["cancelled"] is True and out["state_before"] == "RUNNING", out
        assert out["grace_waited_s"] is not None and out["grace_waited_s"] <= 31, out
    saved = jobs.markers("saved", 0)
    _check_saved(saved, 0)
    waited = {n: json.loads(p.stdout)["grace_waited_s"] for n, p in procs.items()}
    for name, marks in saved.items():
        _figures("cancel", {name: marks}, f"clusterkit cancel waited {waited[name]} s of grace_s 30 s")
    jobs.wait_state(lambda s: s["state"] == "CANCELLED", "CANCELLED")
    for name, job in jobs.ids.items():
        # a requeue comes from the script or from Slurm at the script's end: once sacct has the
        # script ended, slurmctld has done either, and the status shows it
        cli.wait_for(job, lambda s, job=job: _script_ended(cli, job), timeout=120, what=f"{name}: the script's end")
        st = cli.status(job)
        assert st["state"] == "CANCELLED" and not st["restarts"], (name, st)
        assert not (cli.runs / f"cancel-{name}" / f"{job}.result").exists(), name
    assert all(not m for m in jobs.markers("started", 1).values())


def test_restart_budget_stops_requeues_with_the_reason(cli: CK, site: Path) -> None:
    """max_restarts=1: the first warning requeues, a preemption of the restart does not."""
    cli.bed.wait_idle()
    # the restart must still be training when the preemption comes (by default the stand-in
    # finishes a second after its first restart, racing the preemption)
    jobs = Jobs(cli, site, "budget", {"srun": []}, "--set", "max_restarts=1", script=("--finish-on-restart", "5"))
    (job,) = jobs.ids.values()
    jobs.wait_markers("started", 0, START_S)
    cli.bed.run("scancel", "--batch", "--signal=USR2", job)
    jobs.wait_markers("saved", 0, 60)
    jobs.wait_state(lambda s: s["state"] == "PENDING" and s["restarts"] == 1, "requeued")
    jobs.release()
    jobs.wait_markers("started", 1, START_S)
    _preempt(cli)
    saved = jobs.wait_markers("saved", 1, 60)
    _check_saved(saved, 1)
    st = cli.wait_for(job, lambda s: s["state"] in ("FAILED", "COMPLETED", "CANCELLED"), timeout=90, what="the end")
    assert st["state"] == "FAILED" and st["exit_code"] == 1 and st["restarts"] == 1, st
    assert st["reason"].startswith("stopped by preemption") and "budget of 1 restarts is spent" in st["reason"], st
    human = cli("status", job)
    assert "budget of 1 restarts is spent" in human.stdout, human.stdout


def test_cancel_now_skips_the_grace_time(cli: CK) -> None:
    run_dir = cli.runs / "now"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--launcher", "srun", "--out", str(run_dir), "--json", "--",
               # the save ignores further TERMs (srun's own forwarding can send a second one), as a
               # training job's handler would: only Slurm's KILL can stop it
               # `&&`: "saved" only if the 20 s save ran to its end (Slurm's KILL may reach the
               # sleep a moment before the shell, which may then still print a line)
               "bash", "-c", "trap 'echo TERM at $(date +%s.%N); trap \"\" TERM; sleep 20 && echo saved' TERM; "
               "echo up; sleep 300 & wait")
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)["job_id"]
    cli.wait_for(job, lambda s: s["state"] == "RUNNING" and len(list((run_dir / "logs").glob("*.rank*.out"))) == 2
                 and all("up" in p.read_text() for p in (run_dir / "logs").glob("*.rank*.out")), what="both ranks up")
    out = cli("cancel", job, "--now", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"schema_version": 2, "job": f"testbed:{job}", "cancelled": True,
                                      "state_before": "RUNNING", "grace_waited_s": None}
    cli.wait_for(job, lambda s: s["state"] == "CANCELLED", timeout=30)
    ranks = "".join(p.read_text() for p in (run_dir / "logs").glob("*.rank*.out"))
    assert "saved" not in ranks  # a 20 s save does not fit: --now means now


def test_a_requeue_past_the_budget_stops_at_the_start_of_the_run(cli: CK) -> None:
    """Slurm may requeue without asking the script (node failure, an admin's `scontrol requeue`):
    the next run checks SLURM_RESTART_COUNT against max_restarts and ends FAILED with the reason."""
    run_dir = cli.runs / "past"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--launcher", "srun", "--set", "max_restarts=1", "--out", str(run_dir), "--json", "--",
               "bash", "-c", "echo up; sleep 300")
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)["job_id"]
    log = run_dir / "logs" / f"slurm-{job}.out"
    for restart in (0, 1):
        cli.wait_for(job, lambda s, restart=restart: s["state"] == "RUNNING" and log.exists()
                     and f"(restart {restart} of at most 1)" in log.read_text(), what=f"run {restart}")
        cli.bed.run("scontrol", "requeue", job)
        cli.wait_for(job, lambda s, restart=restart: s["state"] == "PENDING" and s["restarts"] == restart + 1,
                     what="requeued")
        time.sleep(1.2)  # see Jobs.release
        cli.bed.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    st = cli.wait_for(job, lambda s: s["state"] in ("FAILED", "COMPLETED", "CANCELLED"), what="the end")
    assert (st["state"], st["exit_code"], st["restarts"]) == ("FAILED", 1, 2), st
    assert st["reason"] == "restart 2 is past the budget of 1 restarts: not running again", st
    assert (run_dir / f"{job}.result").read_text().strip() == "1"
