"""The site's ``watch:`` keys: when the job's supervisor calls a run stalled, and the
process-group timeouts the job hands the training script (docs/jobs.md, "When the run stops
making progress"; the rule: :mod:`clusterkit.supervise.stall`).

The defaults, and why: PyTorch's process-group (NCCL) timeout is 10 minutes by default, so a
hung rank holds every other one for 10 minutes before anything ends; a floor of 5 minutes
finds it first.  Step times vary (data loading, evaluation, logging steps), so a stall is 10
median steps without progress, never less than the floor.  The first steps build NCCL's
communicators and compile: 3 steps of warm-up are not judged.  A checkpoint save marked as one
may take 30 minutes.  torchtitan's pattern for the process group: a long timeout for start-up
(its default 300 s), a short one once the first step is done (100 s); the job exports both.
A straggler is a rank whose own work per step (its median over its last 20 steps) is more than
1.5 times the other ranks' median: a healthy rank's median stays well within that, while a node
at half speed sets the pace of the whole run.  Replacing a straggler (``straggler_replace``) is
off by default: naming one in ``status`` is free, while a replacement ends the launch step at a
checkpoint and restarts the ranks (minutes of start-up, and a spare or a requeue it uses up); a
site turns it on where a slow node costs more than a restart.
After a stall that names no node (every rank waits in a collective), the pairwise performance
check runs on the allocation (``recheck_after_hang``, on by default): without it recovery
relaunches on the same nodes, and a slow or cut link hangs the run again, one stall limit (5
minutes and more) a time until the relaunch budget is spent; the check costs at most the site's
``perf.timeout_s`` (about a minute with the defaults), only after such a hang, and only in jobs
with recovery inside the allocation (multi-node jobs in srun steps).  A site whose nodes cannot
run the check (no torch) turns it off: there it would only fail alike and name no node.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class WatchKeys(BaseModel):
    """Stall detection (``stall_floor_s: 0`` turns it off) and the process-group timeouts."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    stall_floor_s: float = Field(300.0, ge=0, le=86400, description="no progress for this long (at least) is a "
                                 "stall; 0: the supervisor does not watch")
    stall_factor: float = Field(10.0, ge=1, le=1000, description="... or for this many median step times, if longer")
    warmup_steps: int = Field(3, ge=0, le=1_000_000, description="steps of each attempt not judged (start-up)")
    save_limit_s: float = Field(1800.0, gt=0, le=86400, description="how long a checkpoint save marked as one "
                                "(clusterkit.progress(step, saving=True)) may take")
    pg_timeout_start_s: int = Field(1800, ge=1, le=86400, description="CK_PG_TIMEOUT_START_S: the training "
                                    "script's process-group timeout for start-up and the first steps")
    pg_timeout_s: int = Field(600, ge=1, le=86400, description="CK_PG_TIMEOUT_S: its process-group timeout "
                              "after the first steps")

    straggler_ratio: float = Field(1.5, ge=0, le=100, description="a rank slower than this many times the "
                                   "other ranks' median step (work) time is named a straggler in status; 0: not judged")
    straggler_replace: bool = Field(False, description="a straggler that stays one is replaced at the next "
                                    "checkpoint save: the launch step ended, its node dropped, a spare taken (else "
                                    "what recovery does without one), training resumed from that checkpoint")
    recheck_after_hang: bool = Field(True, description="after a stall that names no node, recovery runs the "
                                     "pairwise performance check (preflight --perf) on the allocation and drops the "
                                     "one node below par (a slow or cut link); jobs with recovery in the allocation")

    @field_validator("straggler_ratio")
    @classmethod
    def _ratio(cls, v: float) -> float:
        if 0 < v <= 1:
            raise ValueError("must be 0 (off) or more than 1")
        return v

    @field_validator("stall_floor_s", "stall_factor", "save_limit_s", "straggler_ratio", mode="before")
    @classmethod
    def _seconds(cls, v: object) -> object:
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v
