"""The job script's end-game, one test per transition, on the rendered script itself.

Real bash, real signals, real child processes: the ranks are rank stand-ins that save on TERM;
``scontrol``/``scancel``/``srun`` are stand-ins recording their calls (see harness.py).  The
live-Slurm counterparts are in tests/slurm/test_preemption.py.
"""

from __future__ import annotations

import signal
from pathlib import Path

from tests.jobscript.conftest import site_file
from tests.jobscript.harness import JOB_ID, until

WAITING = "waiting for Slurm to end this run; no result is written"
IGNORED = "SIGUSR2 while waiting for Slurm to end this run: ignored"


def test_term_then_usr2_keeps_waiting_for_slurms_end(job) -> None:
    """Slurm's TERM (a cancel), the ranks save and end, and then the time-limit warning comes:
    the warning must not end the wait (the shell would exit 143 before Slurm ends the job)."""
    j = job().start()
    j.await_ranks()
    j.slurm_term()
    j.await_marker("saved")
    j.await_log(WAITING)
    j.usr2()
    j.await_log(IGNORED)
    assert j.alive(), j.log()
    j.slurm_term()                       # Slurm's next TERM ends the shell: untrapped
    assert j.wait() == -signal.SIGTERM, j.log()
    assert j.result() is None
    assert j.calls("scancel") == []      # no warning went out after Slurm's TERM
    assert not any(c.startswith("requeue") for c in j.calls("scontrol"))


def test_usr2_then_term_saves_then_waits_without_requeue(job) -> None:
    """The warning, the ranks save slowly, and Slurm's TERM comes (the time limit): the shell waits
    for the ranks, then for Slurm; it neither requeues nor writes a result."""
    j = job(JS_RANK_SAVE="hold").start()
    j.await_ranks()
    j.usr2()
    j.await_marker("term")
    assert j.calls("scancel") == [f"--signal=TERM {JOB_ID}"]
    j.slurm_term()
    j.await_log("SIGTERM: Slurm is ending this run")
    assert j.alive() and j.markers("saved") == [], "the shell or a rank ended before the ranks saved"
    j.touch("release")
    j.await_marker("saved")
    j.await_log(WAITING)
    j.usr2()
    j.await_log(IGNORED)
    j.slurm_term()
    assert j.wait() == -signal.SIGTERM, j.log()
    assert j.result() is None
    assert not any(c.startswith("requeue") for c in j.calls("scontrol"))
    assert j.calls("scancel") == [f"--signal=TERM {JOB_ID}"]     # one warning, never a second


def test_cancel_during_the_grace_period(job) -> None:
    """A cancel while the ranks save after the warning: Slurm's TERM cuts the save short; the
    shell writes no result, requeues nothing, and its grace timer does not outlive it."""
    j = job(JS_RANK_SAVE="cut").start()
    j.await_ranks()
    j.usr2()
    j.await_marker("term")
    j.slurm_term()
    j.await_marker("saved")
    assert j.markers("saved") == ["cut short"] * 2
    j.await_log(WAITING)
    assert "grace time" not in j.log().split("SIGTERM: Slurm is ending this run")[1]
    j.slurm_term()
    assert j.wait() == -signal.SIGTERM, j.log()
    assert j.result() is None and j.reason() is None
    assert not any(c.startswith("requeue") for c in j.calls("scontrol"))


def test_requeue_accepted_waits_for_slurm_and_writes_no_result(job) -> None:
    j = job(restarts=1).start()
    j.await_ranks()
    j.usr2()
    j.await_marker("saved")
    j.await_log("requeueing (restart 2 of 2)")
    j.await_log(WAITING)
    assert f"requeue {JOB_ID}" in j.calls("scontrol")
    j.usr2()
    j.await_log(IGNORED)
    assert j.alive(), j.log()
    j.term_shell()                       # Slurm ends the run it requeued: TERM to the shell alone here
    assert j.wait() == -signal.SIGTERM, j.log()
    until("the wait's sleep and the grace timer to end with the shell", lambda: j.group() == [])
    assert j.result() is None


def test_requeue_refused_while_preempted_writes_no_result(job) -> None:
    """A preemption TERMs the steps alone (the shell hears nothing); Slurm refuses our requeue as
    it requeues the run itself: no result, the shell waits for Slurm's TERM."""
    j = job(JS_PREEMPT_TIME="2026-12-01T19:50:59", JS_REQUEUE_RC="1").start()
    j.await_ranks()
    j.preempt_steps()
    j.await_marker("saved")
    j.await_log("scontrol requeue refused while Slurm preempts this run")
    j.await_log(WAITING)
    assert f"-o show job {JOB_ID}" in j.calls("scontrol") and f"requeue {JOB_ID}" in j.calls("scontrol")
    j.slurm_term()
    assert j.wait() == -signal.SIGTERM, j.log()
    assert j.result() is None


def test_requeue_refused_without_preemption_ends_with_a_reason(job) -> None:
    j = job(JS_REQUEUE_RC="1").start()
    j.await_ranks()
    j.usr2()
    assert j.wait() == 1, j.log()
    assert j.result() == "1\n"
    assert j.reason() == "stopped by the time-limit warning (SIGUSR2) and scontrol requeue failed\n"


def test_warning_with_the_budget_spent_ends_with_a_reason(job) -> None:
    j = job(restarts=2).start()
    j.await_ranks()
    j.usr2()
    assert j.wait() == 1, j.log()
    assert j.markers("saved") == ["saved"] * 2
    assert j.result() == "1\n"
    assert j.reason() == "stopped by the time-limit warning (SIGUSR2) and the budget of 2 restarts is spent\n"
    assert not any(c.startswith("requeue") for c in j.calls("scontrol"))


def test_restart_past_the_budget_never_starts_the_ranks(job) -> None:
    j = job(restarts=3).start()
    assert j.wait() == 1, j.log()
    assert j.rank_pids() == []
    assert j.result() == "1\n"
    assert j.reason() == "restart 3 is past the budget of 2 restarts: not running again\n"


def test_ranks_ending_on_their_own_write_their_status(job) -> None:
    j = job(JS_RANK_RC="3").start()
    j.await_ranks()
    j.touch("finish")
    assert j.wait() == 3, j.log()
    assert j.result() == "3\n"
    assert j.calls("scancel") == []
    assert j.calls("scontrol") == [f"-o show job {JOB_ID}"] or all(
        c.startswith(("show hostnames", "-o show job")) for c in j.calls("scontrol"))


def test_grace_time_over_with_ranks_still_saving_requeues(job, tmp_path: Path) -> None:
    """The ranks outlive the grace time after a warning: the shell stops waiting for them and
    requeues (Slurm's requeue ends what is left of the run)."""
    j = job(site=str(site_file(tmp_path, scheduler__grace_s=1)), JS_RANK_SAVE="hold").start()
    j.await_ranks()
    j.usr2()
    j.await_marker("term")
    j.await_log("the grace time of 1 s is over and ranks are still running")
    j.await_log("launcher exited with status 143")
    j.await_log(WAITING)
    assert f"requeue {JOB_ID}" in j.calls("scontrol")
    assert j.markers("saved") == []          # still saving: Slurm's end of the run cuts them off
    j.slurm_term()
    assert j.wait() == -signal.SIGTERM, j.log()
    assert j.result() is None


def test_local_job_passes_term_to_the_launcher_and_writes_its_status(job) -> None:
    """A local site (no Slurm): a cancel's TERM to the shell goes on to the launcher (the real
    torchrun), whose rank saves; the shell waits for it and writes the launcher's status."""
    j = job(site="local", stage="single-node", nodes=1, launcher="torchrun")
    j.env["SUBMITIT_LOCAL_JOB_ID"] = JOB_ID
    j.start()
    j.await_ranks()
    j.term_shell()
    j.await_log("SIGTERM received: sending TERM to the launcher")
    j.await_marker("saved")
    status = j.wait()
    assert status not in (0, -signal.SIGTERM), j.log()
    assert j.result() == f"{status}\n", j.log()
    assert f"launcher exited with status {status}" in j.log()
    assert j.calls("scontrol") == [] and j.calls("scancel") == [] and j.calls("srun") == []


NO_REQUEUE = f"update JobId={JOB_ID} Requeue=0"


def test_a_restarted_job_ending_for_good_turns_requeue_off_first(job) -> None:
    """Slurm 24.05+ would requeue a once-preempted job again when its script ends (its
    GRACE_PREEMPT mark outlives the requeue): the restart's end for good sets Requeue=0 before
    the result is written, whether it finished or its budget is spent."""
    j = job(restarts=1).start()
    j.await_ranks()
    j.touch("finish")
    assert j.wait() == 0, j.log()
    assert j.result() == "0\n"
    assert j.calls("scontrol")[-1] == NO_REQUEUE, j.calls("scontrol")
    spent = job(restarts=2).start()
    spent.await_ranks()
    spent.usr2()
    assert spent.wait() == 1, spent.log()
    assert spent.calls("scontrol")[-1] == NO_REQUEUE and "Requeue=0 failed" not in spent.log()


def test_a_first_run_never_preempted_leaves_requeue_alone(job) -> None:
    j = job(JS_RANK_RC="3").start()
    j.await_ranks()
    j.touch("finish")
    assert j.wait() == 3, j.log()
    assert NO_REQUEUE not in j.calls("scontrol")
