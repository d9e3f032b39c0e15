"""How a run ends: facts in, an action out.  Pure: no process, no clock, no environment.

The supervisor (:mod:`clusterkit.supervise.endgame`) gathers the facts (the restart count, what
stopped the ranks, Slurm's TERM, the launcher's status, what ``scontrol`` answered) and does
what these functions say.  The states: running; warned (Slurm's USR2 before the time limit, or
a preemption seen afterwards: the ranks were told to save); stopping (Slurm's TERM: a cancel,
the end of a preemption's grace time or the time limit); then requeued, refused, out of budget
or done.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WARNING = "the time-limit warning (SIGUSR2)"
FRAMEWORK = "framework"


@dataclass(frozen=True)
class Facts:
    """What the supervisor knows once the launcher is gone (or the grace time is over)."""

    restarts: int                 # SLURM_RESTART_COUNT: requeues through the queue so far
    max_restarts: int             # the budget of requeues
    rc: int                       # the launcher's status (143 when the grace time ran out)
    warned: str | None = None     # what stopped the ranks: the warning, or a preemption
    preempted: bool = False       # Slurm's PreemptTime is set
    stopping: bool = False        # Slurm's TERM came: Slurm is ending this run itself
    requeue_by: str = "clusterkit"
    judges_chain: bool = False    # a chain member that is not the last one

    @property
    def why(self) -> str:
        return f"stopped by {self.warned}"


@dataclass(frozen=True)
class WaitForSlurm:
    """No result: Slurm is ending this run (and requeues it); exit ``status`` only if it never does."""

    status: int
    why: str


@dataclass(frozen=True)
class Finish:
    """The end for good with the launcher's status; ``judge_chain``: ask doctor first."""

    status: int
    judge_chain: bool = False


@dataclass(frozen=True)
class Fail:
    """The end for good with a reason (``line``: what the log says, when it says more)."""

    status: int
    reason: str
    line: str = ""


@dataclass(frozen=True)
class Requeue:
    """Ask Slurm to requeue this run (``line``: what the log says first)."""

    line: str


@dataclass(frozen=True)
class AskFramework:
    """``requeue_by=framework``: look whether the framework's requeue is pending."""


Action = WaitForSlurm | Finish | Fail | Requeue | AskFramework


def end_game(f: Facts) -> Action:
    """The first action once the launcher is gone: Slurm's end, the end for good, or a requeue."""
    if f.stopping:
        return WaitForSlurm(143, "Slurm's TERM came: Slurm ends this run (and requeues it after a preemption)")
    if f.warned is None:
        return Finish(f.rc, judge_chain=f.judges_chain and f.rc != 0)
    if f.requeue_by == FRAMEWORK:
        return AskFramework()
    if f.restarts >= f.max_restarts:
        spent = f"{f.why} and the budget of {f.max_restarts} restarts is spent"
        return Fail(1, spent, f"{spent}: not requeueing")
    return Requeue(f"{f.why}: requeueing (restart {f.restarts + 1} of {f.max_restarts})")


def local_end(rc: int, warned: str | None, grace_s: int) -> tuple[int, str]:
    """The end of a run on the local site (no Slurm, no requeue): the launcher's status, or, after
    the time-limit warning, a failure that says the ranks were stopped and how to go on."""
    if warned is None:
        return rc, ""
    return 1, (f"the local site's time limit came: every rank got SIGTERM and {grace_s} s to save (launcher "
               f"status {rc}); the local site does not requeue: submit again with the same --run-name to resume "
               "from the checkpoint, or with a longer --set time=MINUTES")


def after_requeue(f: Facts, accepted: bool) -> WaitForSlurm | Fail:
    """Slurm's answer to our requeue.  Slurm answers an accepted requeue with TERM to the job's
    processes, so a TERM that came meanwhile (``f.stopping``) means it is ending this run too;
    while Slurm preempts a run itself it refuses our requeue: not an end for good either."""
    if accepted or f.stopping:
        return WaitForSlurm(0, "requeued: Slurm ends this run and starts it again")
    if f.preempted:
        return WaitForSlurm(143, "scontrol requeue refused while Slurm preempts this run: Slurm ends it")
    return Fail(1, f"{f.why} and scontrol requeue failed", f"{f.why} and scontrol requeue failed: not requeueing")


def after_framework(f: Facts, pending: bool) -> WaitForSlurm | Fail:
    """``requeue_by=framework``: the ranks' framework calls ``scontrol requeue`` itself; clusterkit never does."""
    if pending:
        return WaitForSlurm(0, f"{f.why}: the framework requeued this run; Slurm ends it and starts it again")
    if f.preempted:
        return WaitForSlurm(143, f"{f.why}: Slurm ends this preempted run (and requeues it under PreemptMode=REQUEUE)")
    return Fail(f.rc, f"{f.why}; the framework did not requeue it (launcher status {f.rc})")


def requeue_off_first(restarts: int, preempted: bool, warned: str | None) -> bool:
    """Whether the end for good turns requeue off first (``scontrol update Requeue=0``).

    Slurm 24.05 and later mark a job preempted with a grace time (slurmctld's GRACE_PREEMPT
    flag) and keep the mark across the requeue that follows; a batch script of a job with that
    mark that ends later, with any status, is requeued again, so a run that finished, or stopped
    with its restart budget spent, would start once more.  Slurm then records that end as
    PREEMPTED; the result file says what it was.  Slurm 22.05 never needs it.
    """
    return restarts > 0 or preempted or warned is not None


def over_budget(restarts: int, max_restarts: int) -> str | None:
    """The reason a run past its restart budget does not start again, or None."""
    if restarts <= max_restarts:
        return None
    return f"restart {restarts} is past the budget of {max_restarts} restarts: not running again"


_PREEMPT = re.compile(r"PreemptTime=(\S*)")
_RESTARTS = re.compile(r" Restarts=([0-9]+)")
_REQUEUE_STATE = re.compile(r" JobState=(REQUEUED|REQUEUE_FED|REQUEUE_HOLD|PENDING) ")


def preemption(show_job: str) -> str | None:
    """What stopped a run whose steps Slurm preempted (``scontrol -o show job``'s PreemptTime),
    or None: ``"preemption (PreemptTime=...)"``."""
    seen = _PREEMPT.search(show_job)
    if seen is None or seen.group(1) in ("", "None"):
        return None
    return f"preemption ({seen.group(0)})"


def requeue_pending(show_job: str, restarts: int) -> bool:
    """Whether Slurm holds a requeue of this run: its restart count went past this run's, or its
    state is a requeue's (``scontrol -o show job``)."""
    seen = _RESTARTS.search(show_job)
    if seen is not None and int(seen.group(1)) > restarts:
        return True
    return _REQUEUE_STATE.search(show_job) is not None


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: 128+N for a child that signal N ended."""
    return 128 - returncode if returncode < 0 else returncode


_CATEGORY = re.compile(r"[^a-z-]")


def chain_category(doctor_out: str) -> str:
    """doctor's ``--category`` answer, bounded and reduced to its vocabulary's letters."""
    return _CATEGORY.sub("", doctor_out[:64])


def later_members(ids_text: str, me: str) -> list[str]:
    """The chain members queued after ``me``: job ids from the chain's ids file, at most 100."""
    rest: list[str] = []
    seen = False
    for line in ids_text[:4096].splitlines():
        if seen and line.isascii() and line.isdigit():
            rest.append(line)
        seen = seen or line == me
    return rest[:100]


def chain_successors(listed: list[str], me: str, pending: str) -> list[str]:
    """Of the ids the chain's ids file lists after ``me``, those Slurm holds as this chain's next
    members: walking from ``me``, each must be one of the user's pending jobs (``pending``: squeue's
    ``%i %E`` lines) whose dependency is afterany on the member before it.  The walk stops at the
    first that is not, so a forged ids file cannot reach the user's other jobs."""
    deps: dict[str, set[str]] = {}
    for line in pending.splitlines()[:100_000]:
        parts = line.split()
        if len(parts) == 2 and parts[0].isascii() and parts[0].isdigit():
            deps[parts[0]] = {d.split("(", 1)[0] for d in parts[1].split(",")}
    rest: list[str] = []
    prev = me
    for job in listed:
        if f"afterany:{prev}" not in deps.get(job, set()):
            break
        rest.append(job)
        prev = job
    return rest
