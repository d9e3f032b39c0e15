"""The job script's long-run parts on the rendered script itself: a framework's requeue
(``--set requeue_by=framework``) and a chain member that fails (``--chain``).

Real bash, real signals; ``scontrol``, ``scancel`` and the in-job ``clusterkit`` are the
stand-ins of harness.py.  The live-Slurm counterparts are tests/slurm/test_lightning_requeue.py
and tests/slurm/test_chain.py.
"""

from __future__ import annotations

import getpass
import signal
from dataclasses import replace
from pathlib import Path

from clusterkit.api import Plan, Site
from clusterkit.job.longrun import ChainLink
from tests.jobscript.harness import JOB_ID, RANK, Job

# squeue -t PENDING -o '%i %E' as Slurm 23.02 prints it while member 4321 runs
PENDING_CHAIN = "4322 afterany:4321(unfulfilled)\n4323 afterany:4322(unfulfilled)"
WAITING = "waiting for Slurm to end this run; no result is written"


def test_a_requeue_the_framework_asked_for_waits_for_slurm_and_writes_no_result(job) -> None:
    j = job("--set", "requeue_by=framework", JS_SHOW_RESTARTS="1").start()
    j.await_ranks()
    j.usr2()
    j.await_marker("saved")
    j.await_log("the framework requeued this run; Slurm ends it and starts it again")
    j.await_log(WAITING)
    assert not any(c.startswith("requeue") for c in j.calls("scontrol")), j.calls("scontrol")
    j.term_shell()
    assert j.wait() == -signal.SIGTERM, j.log()
    assert j.result() is None


def test_no_requeue_by_the_framework_ends_with_the_ranks_status_and_the_reason(job) -> None:
    j = job("--set", "requeue_by=framework").start()
    j.await_ranks()
    j.usr2()
    assert j.wait() == 143, j.log()     # the rank stand-ins end by their TERM once saved
    assert j.markers("saved") == ["saved"] * 2
    assert j.result() == "143\n"
    assert j.reason() == ("stopped by the time-limit warning (SIGUSR2); the framework did not requeue it "
                          "(launcher status 143)\n")
    assert not any(c.startswith("requeue") for c in j.calls("scontrol"))


def _chain_member(tmp_path: Path, index: int, previous: Path | None = None) -> Path:
    site = Site.load("testbed")
    planned = site.plan([str(RANK)], stage="multi-node", nodes=2, gpus_per_node=1, launcher="srun")
    link = ChainLink(index, 3, ids_file="" if index == 1 else str(tmp_path / "run1" / "chain.ids"),
                     previous_id=None if previous is None else JOB_ID, previous_run_dir=None if previous is None
                     else str(previous), unfixable=("user-code", "launcher-config", "import-env"))
    run = Plan(site, replace(planned.request, chain=link)).render(tmp_path / f"run{index}")
    return run.path


def test_a_chain_member_failing_in_user_code_cancels_the_later_members(tmp_path: Path) -> None:
    run = _chain_member(tmp_path, 1)
    (run / "chain.ids").write_text(f"{JOB_ID}\n4322\n4323\n")
    j = Job(run, tmp_path / "work", nodes=2, JS_RANK_RC="1", JS_DOCTOR_CATEGORY="user-code",
            JS_SQUEUE=PENDING_CHAIN).run_through(1)
    assert f"doctor --logs {run}/logs --category" in j.calls("clusterkit"), j.log()
    assert f"--user={getpass.getuser()} -- 4322 4323" in j.calls("scancel"), j.calls("scancel")
    assert (run / f"{JOB_ID}.unfixable").read_text() == "user-code\n"
    assert "chain: doctor says user-code, which a restart cannot fix: the chain stops here" in j.log()


def test_a_chain_member_failing_for_a_reason_a_restart_may_fix_lets_the_next_run(tmp_path: Path) -> None:
    run = _chain_member(tmp_path, 1)
    (run / "chain.ids").write_text(f"{JOB_ID}\n4322\n")
    j = Job(run, tmp_path / "work", nodes=2, JS_RANK_RC="1", JS_DOCTOR_CATEGORY="nccl-network").run_through(1)
    assert j.calls("scancel") == [] and not (run / f"{JOB_ID}.unfixable").exists()
    assert "chain: doctor says nccl-network: a restart may fix it; the next member runs" in j.log()


def test_a_member_whose_previous_stopped_the_chain_runs_nothing(tmp_path: Path) -> None:
    first = _chain_member(tmp_path, 1)
    (first / f"{JOB_ID}.unfixable").write_text("user-code\n")
    (first / "chain.ids").write_text(f"{JOB_ID}\n4325\n4326\n")
    run = _chain_member(tmp_path, 2, previous=first)
    j = Job(run, tmp_path / "work", nodes=2, SLURM_JOB_ID="4325",
            JS_SQUEUE="4326 afterany:4325(unfulfilled)").start()
    try:
        assert j.wait() == 1, j.log()
    finally:
        j.kill()
    assert j.rank_pids() == []
    assert f"--user={getpass.getuser()} -- 4326" in j.calls("scancel"), j.calls("scancel")
    assert (run / "4325.reason").read_text().startswith(
        f"chain stopped: member 1 (job {JOB_ID}) failed with user-code that a restart cannot fix")
