"""When a run has stopped making progress: facts in, a verdict out.  Pure: no process, no clock,
no environment (docs/architecture.md §3, "Watching a run"; docs/jobs.md, "When the run stops
making progress").

The facts are what the supervisor saw of one attempt: each new progress line
(:mod:`clusterkit.heartbeat`) with the supervisor's own time of first sight (so the clocks of
rank 0's node and the batch host never meet), or, when the job writes no progress file at all,
the time of the newest write to the attempt's rank logs.  The rule:

- a stall is no new progress line for longer than ``max(floor_s, factor x median step time)``,
  once the attempt reported ``warmup_steps`` steps past the one it began at (the first steps
  build communicators, compile and warm caches: the process group's start-up timeout covers
  them); where it began is the first mark its rank 0 appended to the progress log, else the
  first line seen (the supervisor may first see a line many steps in);
- a line that marks a checkpoint save (``phase=save``) has its own, longer limit,
  ``max(save_s, factor x median step time)``: a long save is not a stall;
- the median step time counts only train-to-train intervals (a save between two lines is not a step);
- without a progress file the newest log write stands in, with the save limit (a run that
  reports nothing cannot tell a save from a hang), and the verdict says so.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """The site's ``watch:`` keys (or ``--set``); ``floor_s`` 0 turns watching off."""

    floor_s: float = 300.0
    factor: float = 10.0
    warmup_steps: int = 3
    save_s: float = 1800.0


@dataclass(frozen=True)
class Seen:
    """A progress line as the supervisor first saw it (``at``: its own monotonic clock)."""

    step: int
    phase: str          # train | save
    at: float


@dataclass(frozen=True)
class Stall:
    """No progress for ``quiet_s`` seconds, past ``limit_s``."""

    quiet_s: float
    limit_s: float
    step: int | None    # the last step reported; None: no progress file (the logs stood in)
    phase: str          # train | save | logs

    def worded(self) -> str:
        if self.phase == "logs":
            what = "no write to the rank logs (the job reports no progress: the newest log write stands in)"
        elif self.phase == "save":
            what = f"no progress since the checkpoint save at step {self.step} began"
        else:
            what = f"no progress since step {self.step}"
        return f"{what} for {self.quiet_s:.0f} s, past the limit of {self.limit_s:.0f} s"


def median_step_s(seen: Sequence[Seen]) -> float | None:
    """The median seconds per step over consecutive train lines (None before two of them)."""
    per: list[float] = []
    for a, b in itertools.pairwise(seen):
        if a.phase == b.phase == "train" and b.step > a.step:
            per.append((b.at - a.at) / (b.step - a.step))
    return statistics.median(per) if per else None


def limit_s(seen: Sequence[Seen], limits: Limits, first: int | None = None) -> float | None:
    """How long the last line may stand before it is a stall; None while warming up.  ``first``:
    the step the attempt began at, where known (the watcher looks every few seconds, and its
    first sight of the progress file may come well past the attempt's first steps)."""
    if not seen:
        return None
    began = seen[0].step if first is None else min(first, seen[0].step)
    if seen[-1].step - began < limits.warmup_steps:
        return None
    scaled = limits.factor * (median_step_s(seen) or 0.0)
    return max(limits.save_s if seen[-1].phase == "save" else limits.floor_s, scaled)


def verdict(seen: Sequence[Seen], now: float, limits: Limits, *, reporting: bool,
            started: float, logs_at: float | None = None, first: int | None = None) -> Stall | None:
    """Whether the attempt (started at ``started``) has stalled at ``now``.  ``seen``: this
    attempt's progress lines, oldest first (its step counting restarted where it went back);
    ``reporting``: a progress file exists; ``logs_at``: the newest rank log write; ``first``:
    the step the attempt began at, by its progress log (None: the first line seen stands in)."""
    if limits.floor_s <= 0:
        return None
    if not seen:
        if reporting:
            return None   # a progress file from before this attempt: starting, not yet reporting
        last = max(started, logs_at if logs_at is not None else started)
        limit = max(limits.floor_s, limits.save_s)
        return Stall(now - last, limit, None, "logs") if now - last > limit else None
    judged = limit_s(seen, limits, first)
    if judged is None:
        return None
    quiet = now - seen[-1].at
    return Stall(quiet, judged, seen[-1].step, seen[-1].phase) if quiet > judged else None
