"""A run's account: what a training run (every job under one run name: restarts, requeues, chain
members) cost and what it kept.  Pure arithmetic over allocations already read
(:class:`Allocation`: from Slurm's accounting, :mod:`clusterkit.scheduler.slurm.sacct_runs`, or
from a job's record) and each job's attempts and progress line; docs/jobs.md, "What a run cost".

* ``wall_s``: from the first submission to the last end (now, while a job of the run may still run).
* ``allocated_s`` / ``gpu_hours``: every allocation's elapsed time, and times its GPUs.
* ``waiting_s``: wall time in which the run held no allocation at all (the queue before it started,
  the queue after a requeue, the gap between chain members).
* ``requeued_s``: the allocations that ended in a requeue (every run of a job but its last).  What
  they did since their last checkpoint was lost; how much is not recorded, so all of it is counted
  lost: an upper bound on the loss.
* ``kept_s = allocated_s - requeued_s`` and ``goodput = kept_s / wall_s``: the share of wall time
  spent in allocations that were kept.  Start-up and the failed attempts inside a kept allocation
  (``failed_attempts``, counted, not timed) are inside it, so this is an upper bound on the run's
  effective training time ratio (ETTR), as ``requeued_s`` is an upper bound on its loss.
* ``steps``: the newest progress line of any job of the run (``clusterkit.progress``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Allocation:
    """One run of one job: from Slurm's accounting, or (``source`` ``record``) from clusterkit's
    own record where there is no accounting (a local job, a Slurm without slurmdbd)."""

    job_id: str
    state: str
    submit: float | None      # unix seconds
    start: float | None
    end: float | None         # None: not ended (yet)
    elapsed_s: float
    gpus: int | None          # None: not known
    source: str = "sacct"


@dataclass(frozen=True)
class Member:
    """One job of the run: its allocations (oldest first), failed attempts, newest progress line."""

    job_id: str
    allocations: tuple[Allocation, ...]
    failed_attempts: int = 0
    step: int | None = None
    step_time: float | None = None
    ended: bool = True        # the job will run no more (terminal in Slurm's view or its record's)


@dataclass(frozen=True)
class Account:
    run_name: str
    jobs: tuple[str, ...]
    sources: tuple[str, ...]
    open: bool
    wall_s: float
    allocated_s: float
    gpu_hours: float | None
    waiting_s: float
    allocation_count: int
    requeues: int
    requeued_s: float
    requeued_gpu_hours: float | None
    failed_attempts: int
    kept_s: float
    goodput: float | None
    steps: int | None


def _union(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, None
    for a, b in sorted(intervals):
        if reach is None or a > reach:
            total += b - a
            reach = b
        elif b > reach:
            total += b - reach
            reach = b
    return total


def _gpu_hours(allocs: Sequence[Allocation]) -> float | None:
    if any(a.gpus is None for a in allocs if a.elapsed_s > 0):
        return None
    return sum(a.elapsed_s * (a.gpus or 0) for a in allocs) / 3600.0


def account(run_name: str, members: Sequence[Member], now: float) -> Account:
    """The account of the run made of ``members`` (``now``: where a job has not ended)."""
    allocs = [a for m in members for a in m.allocations]
    is_open = any(not m.ended for m in members)
    starts = [a.submit if a.submit is not None else a.start for a in allocs]
    first = min((t for t in starts if t is not None), default=None)
    ends = [a.end if a.end is not None else (now if a.start is not None else None) for a in allocs]
    last = now if is_open else max((t for t in ends if t is not None), default=None)
    wall = max(0.0, last - first) if first is not None and last is not None else 0.0
    spans = [(a.start, e) for a, e in zip(allocs, ends, strict=True)
             if a.start is not None and e is not None and e >= a.start]
    busy = _union(spans)
    requeued = [a for m in members for a in m.allocations[:-1]]
    allocated = float(sum(a.elapsed_s for a in allocs))
    lost = float(sum(a.elapsed_s for a in requeued))
    kept = allocated - lost
    newest = max((m for m in members if m.step is not None), key=lambda m: m.step_time or 0.0, default=None)
    return Account(
        run_name=run_name, jobs=tuple(m.job_id for m in members),
        sources=tuple(sorted({a.source for a in allocs})), open=is_open,
        wall_s=wall, allocated_s=allocated, gpu_hours=_gpu_hours(allocs),
        waiting_s=max(0.0, wall - busy), allocation_count=len(allocs), requeues=len(requeued),
        requeued_s=lost, requeued_gpu_hours=_gpu_hours(requeued),
        failed_attempts=sum(m.failed_attempts for m in members),
        kept_s=kept, goodput=min(1.0, kept / wall) if wall > 0 else None,
        steps=newest.step if newest is not None else None)
