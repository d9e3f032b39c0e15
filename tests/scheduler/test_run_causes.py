"""A run's allocated time by cause (clusterkit/scheduler/runcauses.py) on allocations, progress
marks and the supervisor's attempts given directly: start-up, kept, lost since the last
checkpoint, recovery, ETTR, and each failure with its verdict and the nodes dropped."""

from __future__ import annotations

import pytest

from clusterkit.scheduler.runaccount import Allocation
from clusterkit.scheduler.runcauses import Fault, JobFacts, Mark, causes


def alloc(job: str, state: str, start: float, end: float | None) -> Allocation:
    return Allocation(job, state, 0.0, start, end, (end or start) - start, 8)


def test_a_requeue_loses_the_training_since_its_last_checkpoint() -> None:
    # run 1: starts 100, first step 160, saves at 400 (done by 420), node fails at 700;
    # run 2: starts 900, first step 1000, ends 1500
    job = JobFacts("7", (alloc("7", "NODE_FAIL", 100, 700), alloc("7", "COMPLETED", 900, 1500)),
                   marks=(Mark(160, 1, "train"), Mark(400, 50, "save"), Mark(420, 50, "train"),
                          Mark(1000, 51, "train")),
                   faults=(Fault(700, 0, 1, "ecc-error: Xid 48", ("node3",), "requeue"),))
    c = causes([job], now=9999)
    assert c.allocated_s == 1200
    assert (c.startup_s, c.recovery_s, c.lost_s, c.kept_s, c.unreported_s) == (60, 100, 300, 740, 0)
    assert c.startup_s + c.recovery_s + c.lost_s + c.kept_s + c.unreported_s == c.allocated_s
    assert c.ettr == pytest.approx(740 / 1200)
    (f,) = c.failures
    assert (f.job_id, f.restart, f.time, f.checkpoint, f.lost_s) == ("7", 0, 700, 400, 300)
    assert f.verdict == "ecc-error: Xid 48" and f.dropped == ("node3",) and f.what == "allocation ended NODE_FAIL"
    assert f.recovery_s == 300                     # back to training at 1000, through the queue
    assert c.checkpoints == (("7", 400),)


def test_a_relaunch_inside_the_allocation_is_recovery_and_its_loss_without_a_checkpoint_is_all() -> None:
    # one allocation 0-1000: training from 50, attempt 1 fails at 300 (no save yet), relaunched,
    # training again from 380 to the end
    job = JobFacts("8", (alloc("8", "COMPLETED", 0, 1000),),
                   marks=(Mark(50, 1, "train"), Mark(380, 1, "train")),
                   faults=(Fault(300, 0, 1, "nccl-timeout", ("node2",), "relaunch"),))
    c = causes([job], now=9999)
    assert (c.startup_s, c.lost_s, c.recovery_s, c.kept_s) == (50, 250, 80, 620)
    (f,) = c.failures
    assert f.what == "attempt 1 (relaunched)" and f.checkpoint is None and f.lost_s == 250 and f.recovery_s == 80


def test_a_save_that_never_finished_is_no_checkpoint() -> None:
    job = JobFacts("9", (alloc("9", "FAILED", 0, 500),),
                   marks=(Mark(10, 1, "train"), Mark(200, 9, "save"), Mark(220, 9, "train"), Mark(450, 20, "save")))
    (f,) = causes([job], now=9999).failures
    assert f.checkpoint == 200 and f.lost_s == 300 and f.verdict == "" and f.dropped == ()


def test_a_chain_member_starts_up_and_a_job_without_progress_is_unreported() -> None:
    one = JobFacts("10", (alloc("10", "COMPLETED", 0, 100),), marks=(Mark(20, 1, "train"),))
    two = JobFacts("11", (alloc("11", "COMPLETED", 200, 300),))
    c = causes([one, two], now=9999)
    assert (c.startup_s, c.kept_s, c.unreported_s, c.lost_s, c.failures) == (20, 80, 100, 0, ())
    assert c.ettr == pytest.approx(80 / 200)


def test_a_running_allocation_counts_to_now_and_nothing_allocated_is_no_ettr() -> None:
    run = JobFacts("12", (Allocation("12", "RUNNING", 0.0, 100.0, None, 50.0, 8),), marks=(Mark(110, 1, "train"),))
    c = causes([run], now=400)
    assert c.allocated_s == 300 and c.kept_s == 290 and c.failures == ()
    assert causes([JobFacts("13", (Allocation("13", "PENDING", 0.0, None, None, 0.0, None),))], now=5).ettr is None


def test_a_run_sacct_shows_as_requeued_is_an_ended_allocation_when_another_followed() -> None:
    # sacct -D prints the requeued run with the state REQUEUED (scontrol requeue); the job ran again
    job = JobFacts("14", (alloc("14", "REQUEUED", 0, 100), alloc("14", "COMPLETED", 130, 200)),
                   marks=(Mark(10, 1, "train"), Mark(40, 3, "save"), Mark(41, 3, "train"), Mark(150, 1, "train")))
    c = causes([job], now=9999)
    (f,) = c.failures
    assert f.what == "allocation ended REQUEUED" and f.checkpoint == 40 and f.lost_s == 60
    assert (c.startup_s, c.recovery_s, c.kept_s) == (10, 20, 30 + 50)


def test_a_job_that_reports_no_progress_lists_its_failures_and_splits_nothing() -> None:
    job = JobFacts("15", (alloc("15", "COMPLETED", 0, 600),),
                   faults=(Fault(200, 0, 0, "gpu-hardware: Xid 79", ("node2",), "relaunch"),))
    c = causes([job], now=9999)
    (f,) = c.failures
    assert f.verdict == "gpu-hardware: Xid 79" and f.dropped == ("node2",) and f.lost_s == 0 and f.checkpoint is None
    assert c.unreported_s == 600 and c.startup_s == c.kept_s == c.lost_s == 0 and c.ettr == 0


def test_a_save_whose_train_mark_came_in_the_same_millisecond_is_a_checkpoint() -> None:
    """The marks have millisecond times: a quick save's train mark can carry the save's own time;
    the log's order says it came after (a local job failed this way on a loaded machine)."""
    job = JobFacts("9", (alloc("9", "FAILED", 100, 200),),
                   marks=(Mark(110, 1, "train"), Mark(150.123, 3, "save"), Mark(150.123, 3, "train")),
                   faults=())
    (f,) = causes([job], now=9999).failures
    assert f.checkpoint == 150.123 and f.lost_s == pytest.approx(200 - 150.123)
    # a save with no train mark after it never finished: no checkpoint
    unfinished = JobFacts("9", (alloc("9", "FAILED", 100, 200),), marks=(Mark(110, 1, "train"), Mark(150, 3, "save")))
    assert causes([unfinished], now=9999).failures[0].checkpoint is None


def test_a_job_that_shrank_when_a_node_went_down_is_one_allocation_not_a_failure() -> None:
    """Slurm records a --no-kill job that lost a node as RESIZING up to the loss, then goes on in
    the next record (the testbed's node-down recovery test showed 'allocation ended RESIZING')."""
    job = JobFacts("10", (alloc("10", "RESIZING", 100, 300), alloc("10", "COMPLETED", 300, 900)),
                   faults=(Fault(290, 0, 0, "down in Slurm", ("node2",), "relaunch"),))
    c = causes([job], now=9999)
    (f,) = c.failures
    assert f.what == "attempt 0 (relaunched)" and f.dropped == ("node2",) and f.restart == 0
    assert c.allocated_s == 800
