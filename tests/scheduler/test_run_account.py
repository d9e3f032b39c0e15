"""The run account's arithmetic (clusterkit/scheduler/runaccount.py) on allocations given
directly: wall time, GPU-hours, time without an allocation, requeues, kept time, goodput, steps."""

from __future__ import annotations

import pytest

from clusterkit.scheduler.runaccount import Allocation, Member, account


def alloc(job: str, state: str, submit: float, start: float | None, end: float | None, gpus: int | None = 8,
          elapsed: float | None = None) -> Allocation:
    if elapsed is None:
        elapsed = (end - start) if start is not None and end is not None else 0.0
    return Allocation(job, state, submit, start, end, elapsed, gpus)


def test_a_requeued_job_loses_its_first_allocation_and_waits_twice() -> None:
    # submitted at 0, queued 100 s, ran 300 s, requeued (node failure), queued 100 s, ran 600 s
    runs = (alloc("7", "NODE_FAIL", 0, 100, 400), alloc("7", "COMPLETED", 400, 500, 1100))
    a = account("r", [Member("7", runs, step=5000, step_time=1090)], now=99_999)
    assert (a.wall_s, a.allocated_s, a.waiting_s) == (1100, 900, 200)
    assert a.gpu_hours == pytest.approx(900 * 8 / 3600)
    assert (a.requeues, a.requeued_s, a.kept_s) == (1, 300, 600)
    assert a.requeued_gpu_hours == pytest.approx(300 * 8 / 3600)
    assert a.goodput == pytest.approx(600 / 1100)
    assert a.steps == 5000 and a.allocation_count == 2 and not a.open


def test_a_chain_waits_between_members_and_counts_every_member() -> None:
    # member 2 was submitted with member 1 and waited on it (afterany), then in the queue 50 s
    one = Member("10", (alloc("10", "TIMEOUT", 0, 20, 1020),), failed_attempts=1, step=100, step_time=1000)
    two = Member("11", (alloc("11", "COMPLETED", 0, 1070, 1570, gpus=16),), step=180, step_time=1560)
    a = account("r", [one, two], now=99_999)
    assert a.jobs == ("10", "11")
    assert (a.wall_s, a.allocated_s, a.waiting_s) == (1570, 1500, 70)
    assert a.gpu_hours == pytest.approx((1000 * 8 + 500 * 16) / 3600)
    assert a.requeues == 0 and a.kept_s == 1500 and a.failed_attempts == 1
    assert a.steps == 180                      # the newest line, not the first member's
    assert a.goodput == pytest.approx(1500 / 1570)


def test_a_run_still_running_is_counted_to_now() -> None:
    running = Member("5", (alloc("5", "RUNNING", 0, 60, None, elapsed=340),), ended=False)
    a = account("r", [running], now=400)
    assert a.open and a.wall_s == 400 and a.waiting_s == 60 and a.allocated_s == 340


def test_a_pending_member_adds_wall_time_and_no_allocation() -> None:
    done = Member("5", (alloc("5", "COMPLETED", 0, 0, 100),))
    pending = Member("6", (alloc("6", "PENDING", 50, None, None, gpus=None),), ended=False)
    a = account("r", [done, pending], now=300)
    assert a.open and a.wall_s == 300 and a.allocated_s == 100 and a.waiting_s == 200
    assert a.gpu_hours == pytest.approx(100 * 8 / 3600)   # a pending job's unknown GPUs cost nothing yet


def test_unknown_gpus_make_gpu_hours_unknown_not_zero() -> None:
    a = account("r", [Member("5", (alloc("5", "COMPLETED", 0, 0, 100, gpus=None),))], now=0)
    assert a.gpu_hours is None and a.allocated_s == 100


def test_nothing_known_is_no_goodput() -> None:
    a = account("r", [Member("5", ())], now=10)
    assert a.wall_s == 0 and a.goodput is None and a.steps is None and a.allocation_count == 0
