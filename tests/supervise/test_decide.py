"""The supervisor's decisions (clusterkit.supervise.decide), facts in, action out: no process.

The same transitions run with real signals and processes in tests/jobscript/test_endgame.py
and on Slurm in tests/slurm/test_preemption.py; here each rule is pinned on its own, with the
neighbouring facts that must not change it.
"""

from __future__ import annotations

import pytest

from clusterkit.supervise import decide
from clusterkit.supervise.decide import AskFramework, Facts, Fail, Finish, Requeue, WaitForSlurm

WARNED = decide.WARNING
PREEMPTED = "preemption (PreemptTime=2026-12-01T19:50:59)"


def facts(**changes: object) -> Facts:
    base: dict[str, object] = {"restarts": 0, "max_restarts": 2, "rc": 0}
    return Facts(**{**base, **changes})  # type: ignore[arg-type]


# ---- the first action once the launcher is gone

def test_slurms_term_always_waits_for_slurm_whatever_else_happened() -> None:
    for extra in ({}, {"warned": WARNED}, {"warned": PREEMPTED, "preempted": True}, {"rc": 1},
                  {"requeue_by": "framework", "warned": WARNED}, {"restarts": 2, "warned": WARNED}):
        assert decide.end_game(facts(stopping=True, **extra)) == WaitForSlurm(
            143, "Slurm's TERM came: Slurm ends this run (and requeues it after a preemption)")


@pytest.mark.parametrize("rc", [0, 3, 143])
def test_ranks_ending_on_their_own_end_the_job_with_their_status(rc: int) -> None:
    assert decide.end_game(facts(rc=rc)) == Finish(rc)


def test_only_a_failed_chain_member_that_is_not_the_last_asks_doctor() -> None:
    assert decide.end_game(facts(rc=1, judges_chain=True)) == Finish(1, judge_chain=True)
    assert decide.end_game(facts(rc=0, judges_chain=True)) == Finish(0)
    assert decide.end_game(facts(rc=1)) == Finish(1)
    # stopped by a warning: Slurm's planned end, not a failure to judge
    assert isinstance(decide.end_game(facts(rc=1, judges_chain=True, warned=WARNED)), Requeue)


def test_a_warning_within_the_budget_requeues_and_names_the_restart() -> None:
    assert decide.end_game(facts(restarts=1, rc=143, warned=WARNED)) == Requeue(
        "stopped by the time-limit warning (SIGUSR2): requeueing (restart 2 of 2)")


def test_a_warning_with_the_budget_spent_fails_with_the_reason() -> None:
    reason = "stopped by the time-limit warning (SIGUSR2) and the budget of 2 restarts is spent"
    assert decide.end_game(facts(restarts=2, rc=143, warned=WARNED)) == Fail(1, reason, f"{reason}: not requeueing")
    assert decide.end_game(facts(restarts=0, max_restarts=0, warned=PREEMPTED, preempted=True)) == Fail(
        1, f"stopped by {PREEMPTED} and the budget of 0 restarts is spent",
        f"stopped by {PREEMPTED} and the budget of 0 restarts is spent: not requeueing")


def test_requeue_by_framework_never_requeues_itself_even_with_the_budget_spent() -> None:
    assert decide.end_game(facts(requeue_by="framework", warned=WARNED)) == AskFramework()
    assert decide.end_game(facts(requeue_by="framework", warned=WARNED, restarts=5)) == AskFramework()


# ---- after our requeue

def test_an_accepted_requeue_or_a_term_meanwhile_waits_for_slurm() -> None:
    done = WaitForSlurm(0, "requeued: Slurm ends this run and starts it again")
    assert decide.after_requeue(facts(warned=WARNED), accepted=True) == done
    assert decide.after_requeue(facts(warned=WARNED, stopping=True), accepted=False) == done


def test_a_refused_requeue_while_preempted_waits_and_otherwise_fails() -> None:
    assert decide.after_requeue(facts(warned=PREEMPTED, preempted=True), accepted=False) == WaitForSlurm(
        143, "scontrol requeue refused while Slurm preempts this run: Slurm ends it")
    reason = "stopped by the time-limit warning (SIGUSR2) and scontrol requeue failed"
    assert decide.after_requeue(facts(warned=WARNED), accepted=False) == Fail(1, reason, f"{reason}: not requeueing")


def test_the_frameworks_requeue_pending_or_a_preemption_waits_and_otherwise_fails_with_its_status() -> None:
    f = facts(requeue_by="framework", warned=WARNED, rc=143)
    assert decide.after_framework(f, pending=True) == WaitForSlurm(
        0, "stopped by the time-limit warning (SIGUSR2): the framework requeued this run; Slurm ends it and starts "
           "it again")
    assert decide.after_framework(facts(requeue_by="framework", warned=PREEMPTED, preempted=True), pending=False) \
        == WaitForSlurm(143, f"stopped by {PREEMPTED}: Slurm ends this preempted run (and requeues it under "
                             "PreemptMode=REQUEUE)")
    assert decide.after_framework(f, pending=False) == Fail(
        143, "stopped by the time-limit warning (SIGUSR2); the framework did not requeue it (launcher status 143)")


# ---- small rules

def test_requeue_is_turned_off_before_the_end_for_good_only_after_a_restart_preemption_or_warning() -> None:
    assert not decide.requeue_off_first(0, False, None)
    assert decide.requeue_off_first(1, False, None)
    assert decide.requeue_off_first(0, True, PREEMPTED)
    assert decide.requeue_off_first(0, False, WARNED)


def test_the_budget_allows_its_last_restart_and_refuses_the_next() -> None:
    assert decide.over_budget(2, 2) is None
    assert decide.over_budget(3, 2) == "restart 3 is past the budget of 2 restarts: not running again"


# `scontrol -o show job` lines as the job script's scontrol stand-in prints them (tests/jobscript/standins/scontrol)
RUNNING = "JobId=4321 JobName=ck-rank JobState=RUNNING Reason=None Restarts=0 PreemptTime=None SuspendTime=None"


def test_preemption_is_read_from_preempttime_and_none_or_empty_is_not_one() -> None:
    assert decide.preemption(RUNNING) is None
    assert decide.preemption(RUNNING.replace("PreemptTime=None", "PreemptTime=")) is None
    assert decide.preemption("") is None
    seen = RUNNING.replace("PreemptTime=None", "PreemptTime=2026-12-01T19:50:59")
    assert decide.preemption(seen) == "preemption (PreemptTime=2026-12-01T19:50:59)"


def test_a_requeue_is_pending_when_the_restart_count_grew_or_the_state_is_a_requeues() -> None:
    assert not decide.requeue_pending(RUNNING, restarts=0)
    assert decide.requeue_pending(RUNNING.replace("Restarts=0", "Restarts=1"), restarts=0)
    assert not decide.requeue_pending(RUNNING.replace("Restarts=0", "Restarts=1"), restarts=1)
    for state in ("REQUEUED", "REQUEUE_HOLD", "PENDING"):
        assert decide.requeue_pending(RUNNING.replace("JobState=RUNNING", f"JobState={state}"), restarts=0)
    assert not decide.requeue_pending(RUNNING.replace("JobState=RUNNING", "JobState=COMPLETING"), restarts=0)


def test_a_child_ended_by_a_signal_has_the_shells_status() -> None:
    assert decide.exit_status(-15) == 143 and decide.exit_status(-9) == 137
    assert decide.exit_status(0) == 0 and decide.exit_status(3) == 3


def test_doctors_category_is_bounded_to_its_letters() -> None:
    assert decide.chain_category("user-code\n") == "user-code"
    assert decide.chain_category("\x1b[31mhost-oom\x1b[0m") == "mhost-oomm"   # escapes lose their letters' meaning
    assert len(decide.chain_category("a" * 10_000)) == 64
    assert decide.chain_category("") == ""


def test_later_members_are_the_ids_after_this_one_digits_only_at_most_100() -> None:
    assert decide.later_members("4321\n4322\n4323\n", "4321") == ["4322", "4323"]
    assert decide.later_members("4320\n4321\n", "4321") == []
    assert decide.later_members("4322\n4323\n", "4321") == []          # this member not listed: nothing after it
    assert decide.later_members("4321\nrm -rf /\n4322\n", "4321") == ["4322"]
    many = "4321\n" + "".join(f"{5000 + i}\n" for i in range(300))
    assert decide.later_members(many, "4321") == [str(5000 + i) for i in range(100)]


def test_a_forged_ids_file_reaches_only_jobs_slurm_holds_as_this_chains_next_members() -> None:
    pending = "4322 afterany:4321(unfulfilled)\n4323 afterany:4322(unfulfilled)\n9999 (null)\n7777 afterok:1\n"
    assert decide.chain_successors(["4322", "4323"], "4321", pending) == ["4322", "4323"]
    # another job of the user, listed by a forged file: not after this chain's member, so not cancelled
    assert decide.chain_successors(["9999", "4322"], "4321", pending) == []
    assert decide.chain_successors(["4322", "7777"], "4321", pending) == ["4322"]
    assert decide.chain_successors(["4323"], "4321", pending) == []      # the walk starts at this job
    assert decide.chain_successors(["4322"], "4321", "") == []           # squeue said nothing: nothing cancelled
    # several dependencies: one of them afterany on the member before is enough
    assert decide.chain_successors(["4322"], "4321", "4322 afterok:1(unfulfilled),afterany:4321(unfulfilled)\n") \
        == ["4322"]


def test_the_local_sites_time_limit_ends_failed_with_how_to_go_on() -> None:
    assert decide.local_end(0, None, 60) == (0, "") and decide.local_end(3, None, 60) == (3, "")
    rc, why = decide.local_end(0, decide.WARNING, 60)   # the ranks saved and exited 0: still not done
    assert rc == 1 and why.startswith("the local site's time limit came: every rank got SIGTERM and 60 s to save")
    assert "--run-name" in why and "--set time=MINUTES" in why
