"""A run's allocated time by cause, and its failures: pure arithmetic over each job's allocations
(:class:`~clusterkit.scheduler.runaccount.Allocation`), its progress marks (the progress log,
:func:`clusterkit.heartbeat.read_log`) and the supervisor's attempts (:mod:`clusterkit.supervise.attempts`).
docs/jobs.md, "What a run cost".

Each allocation, from its start to its end, is cut at its failures: each attempt the supervisor
relaunched inside it (at the attempt's end), and the allocation's own end when it did not complete
(a requeue, a node failure, a time limit, a cancel).  Each piece is

* **start-up**: from the allocation's start to its first progress mark (the first piece of a job's
  first allocation), or **recovery**: the same after a failure (a relaunch, a requeued run);
* **lost**: from the last checkpoint (the newest ``phase=save`` mark that training went on after)
  to the failure; without a checkpoint in the piece, all its training (the restart goes back to an
  older one);
* **kept**: the rest of its training.

A piece with no progress mark is start-up (or recovery) where a failure ended it, and
**unreported** where it ended well or where the job reports no progress at all (nothing to split;
its failures are listed with no time lost).
``ettr = kept / allocated``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from statistics import median

from clusterkit.scheduler.runaccount import Allocation

#: allocation states that ended the allocation without its work being done
ENDED_WELL = frozenset({"COMPLETED"})
STILL = frozenset({"RUNNING", "PENDING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED", "CONFIGURING", "COMPLETING"})


@dataclass(frozen=True)
class Mark:
    time: float
    step: int
    phase: str          # train | save


@dataclass(frozen=True)
class Fault:
    """An attempt the supervisor judged: when it ended, doctor's verdict, nodes dropped, what followed."""

    time: float | None
    restart: int
    attempt: int
    verdict: str
    dropped: tuple[str, ...]
    then: str           # relaunch | requeue | stop


@dataclass(frozen=True)
class JobFacts:
    job_id: str
    allocations: tuple[Allocation, ...]     # oldest first: allocation k is restart k
    marks: tuple[Mark, ...] = ()
    faults: tuple[Fault, ...] = ()


@dataclass(frozen=True)
class Failure:
    job_id: str
    restart: int
    time: float
    what: str                   # "attempt N (relaunched)" or "allocation ended NODE_FAIL"
    verdict: str                # doctor's, where the supervisor judged it; "" where none
    dropped: tuple[str, ...]
    checkpoint: float | None    # the last checkpoint before it (unix seconds)
    lost_s: float
    recovery_s: float           # until training went on (0: it did not, in this allocation)
    judged_by: str = ""         # supervisor (when it happened), doctor (on its logs, for the account) or ""
    not_judged: str = ""        # where no verdict: why


@dataclass(frozen=True)
class Causes:
    allocated_s: float
    startup_s: float
    recovery_s: float
    kept_s: float
    lost_s: float
    unreported_s: float
    ettr: float | None
    failures: tuple[Failure, ...] = field(default=())
    checkpoints: tuple[tuple[str, float], ...] = field(default=())   # (job, time) of each save mark
    saves_s: tuple[float, ...] = field(default=())   # each finished save: its mark to the next train mark

    def measured(self) -> tuple[float | None, float | None]:
        """The median save and the median recovery (failure to training again) this run measured,
        for ``plan --save-s/--restart-s`` or the site's ``reliability:``; None where none was seen."""
        recoveries = [f.recovery_s for f in self.failures if f.recovery_s > 0]
        return (median(self.saves_s) if self.saves_s else None, median(recoveries) if recoveries else None)


def _checkpoint(marks: Sequence[Mark], t0: float, t1: float) -> float | None:
    """The newest save mark in [t0, t1) that a train mark followed before t1 (the save finished).
    "Followed" is the log's order: a save that ends within the millisecond the marks are written in has
    its train mark at the same time."""
    best = None
    for i, m in enumerate(marks):
        if m.phase == "save" and t0 <= m.time < t1 and any(n.phase == "train" and m.time <= n.time <= t1
                                                           for n in marks[i + 1:]):
            best = m.time
    return best


def _joined(allocations: Sequence[Allocation]) -> list[Allocation]:
    """A job's runs, one per restart.  Slurm splits a job's record when the job shrinks (a node of
    a ``--no-kill`` allocation went down, and recovery went on without it): the part before is
    RESIZING and the job goes on in the next record.  That is one allocation, not an end."""
    out: list[Allocation] = []
    for a in allocations:
        if out and out[-1].state == "RESIZING":
            before = out.pop()
            a = replace(a, submit=before.submit, start=before.start if before.start is not None else a.start,
                        elapsed_s=before.elapsed_s + a.elapsed_s,
                        gpus=max(before.gpus or 0, a.gpus or 0) if (before.gpus, a.gpus) != (None, None) else None)
        out.append(a)
    return out


def causes(jobs: Sequence[JobFacts], now: float) -> Causes:
    tot = {"startup": 0.0, "recovery": 0.0, "kept": 0.0, "lost": 0.0, "unreported": 0.0}
    failures: list[Failure] = []
    allocated = 0.0
    for job in jobs:
        marks = sorted(job.marks, key=lambda m: m.time)
        runs = _joined(job.allocations)
        for k, a in enumerate(runs):
            if a.start is None:
                continue
            requeued = k < len(runs) - 1     # a later run of the job followed: this one ended
            running = a.state in STILL and not requeued
            end = a.end if a.end is not None else now if running else a.start + a.elapsed_s
            end = max(a.start, end)
            allocated += end - a.start
            faults = [f for f in job.faults if f.restart == k]
            inside = sorted((f for f in faults if f.then == "relaunch" and f.time is not None
                             and a.start <= f.time <= end), key=lambda f: f.time or 0.0)
            closing = next((f for f in faults if f.then != "relaunch"), None)
            failed_end = requeued or (a.state not in ENDED_WELL and not running)
            cuts: list[tuple[float, Fault | None, str]] = [
                (f.time or 0.0, f, f"attempt {f.attempt} (relaunched)") for f in inside]
            if failed_end:
                cuts.append((end, closing, f"allocation ended {a.state}"))
            after_failure = k > 0
            t0 = a.start
            for t1, fault, what in [*cuts, *([] if failed_end else [(end, None, "")])]:
                failing = bool(what)
                seen = [m for m in marks if t0 <= m.time <= t1]
                wait = "recovery" if after_failure else "startup"
                if not seen:   # a job that reports no progress at all: nothing to split
                    tot[wait if failing and marks else "unreported"] += t1 - t0
                    lost, cp, trained_from = 0.0, None, None
                else:
                    trained_from = seen[0].time
                    tot[wait] += trained_from - t0
                    cp = _checkpoint(marks, trained_from, t1) if failing else None
                    lost = (t1 - (cp if cp is not None else trained_from)) if failing else 0.0
                    tot["lost"] += lost
                    tot["kept"] += (t1 - trained_from) - lost
                if failing:
                    failures.append(Failure(job.job_id, k, t1, what, fault.verdict if fault else "",
                                            fault.dropped if fault else (), cp, lost, 0.0))
                t0, after_failure = t1, after_failure or failing
    failures = _with_recovery(failures, {j.job_id: sorted(j.marks, key=lambda m: m.time) for j in jobs})
    kept = tot["kept"]
    return Causes(allocated, tot["startup"], tot["recovery"], kept, tot["lost"], tot["unreported"],
                  kept / allocated if allocated > 0 else None, tuple(failures),
                  tuple((j.job_id, m.time) for j in jobs for m in j.marks if m.phase == "save"),
                  tuple(d for j in jobs for d in _save_times(sorted(j.marks, key=lambda m: m.time))))


def _save_times(marks: Sequence[Mark]) -> list[float]:
    """How long each save took: from its save mark to the next mark, where that is a train mark."""
    return [round(nxt.time - m.time, 3) for m, nxt in pairwise(marks)
            if m.phase == "save" and nxt.phase == "train"]


def _with_recovery(failures: list[Failure], marks_of: dict[str, list[Mark]]) -> list[Failure]:
    """Each failure's recovery: until the job's next progress mark (in a later allocation too)."""
    out = []
    for f in failures:
        nxt = next((m.time for m in marks_of.get(f.job_id, []) if m.time > f.time), None)
        out.append(replace(f, recovery_s=(nxt - f.time) if nxt is not None else 0.0))
    return out
