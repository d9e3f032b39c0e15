"""Where a pending Slurm job stands in the queue: its place among the pending jobs of its
partition by priority, and Slurm's start estimate where Slurm gives one.

One call, ``squeue -h -t PENDING -o '%i|%P|%Q|%S|%r'``: every pending job the user may see, with
its partition(s), priority, expected start (``N/A`` when the scheduler has none) and reason.
The job's place is one more than the pending jobs that share a partition with it and come
before it (a higher priority, or the same and an older id), leaving out those that could not
start before it anyway (a dependency, a begin time or a hold: :data:`NOT_WAITING`); a job that
waits for one of those itself has no place (its reason says what it waits for).  Where
Slurm hides other users' jobs (``PrivateData=jobs``) the place counts the jobs it shows.

squeue's answer is text from outside: bounded by :mod:`clusterkit.slurmclient`, each line
checked (a job id, partitions of Slurm's name characters, a priority of digits, a start time
of the shape Slurm prints), a line that is not one skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusterkit import slurmclient
from clusterkit.slurmtext import lines as slurm_lines
from clusterkit.vocab import is_job_id

PENDING_ARGV = ("squeue", "-h", "-t", "PENDING", "-o", "%i|%P|%Q|%S|%r")
#: reasons of a pending job that is not competing for nodes yet: it is never ahead of another
NOT_WAITING = frozenset({"Dependency", "DependencyNeverSatisfied", "BeginTime", "JobHeldUser", "JobHeldAdmin"})
MAX_JOBS = 200_000     # lines read: a queue longer than this is cut, the count says "at least"
TIMEOUT_S = 20.0
_PARTITION = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_START = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
_ARRAY = re.compile(r"([0-9]{1,10})_\[[0-9,\-%]{1,200}\]")   # a pending array's unexpanded tasks


@dataclass(frozen=True)
class Pending:
    """One pending job as squeue lists it."""

    job_id: str
    partitions: frozenset[str]
    priority: int
    start: str | None      # Slurm's expected start (its local time, as it prints it), or None
    reason: str


@dataclass(frozen=True)
class Spot:
    """A pending job's place in its queue."""

    position: int          # 1: no job before it
    waiting: int           # pending jobs of its partition(s) competing for nodes, itself included
    partitions: tuple[str, ...]
    start: str | None      # Slurm's start estimate, or None where it gives none

    def worded(self) -> str:
        """``2nd of 5 pending in debug, Slurm's start estimate 2026-12-06T04:10:00``."""
        where = ",".join(self.partitions)
        text = f"{_ordinal(self.position)} of {self.waiting} pending in {where}"
        return text + (f", Slurm's start estimate {self.start}" if self.start else "")

    def to_dict(self) -> dict[str, object]:
        return {"position": self.position, "pending": self.waiting, "partitions": list(self.partitions),
                "start_estimate": self.start}


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _id_key(job_id: str) -> tuple[int, int]:
    base, _, task = job_id.partition("_")
    return int(base), int(task) if task.isdigit() else -1


def parse_pending(text: str) -> dict[str, Pending]:
    """``squeue -h -t PENDING -o '%i|%P|%Q|%S|%r'`` -> job id -> :class:`Pending` (a line that
    does not fit is skipped; a job listed once per partition is one job of those partitions)."""
    out: dict[str, Pending] = {}
    for line in slurm_lines(text)[:MAX_JOBS]:
        cells = line.strip().split("|")
        if len(cells) != 5:
            continue
        job_id, parts, priority, start, reason = (c.strip() for c in cells)
        m = _ARRAY.fullmatch(job_id)
        job_id = m.group(1) if m else job_id
        names = frozenset(parts.split(","))
        if not is_job_id(job_id) or not priority.isdigit() or len(priority) > 20 \
                or not names or not all(_PARTITION.fullmatch(p) for p in names):
            continue
        earlier = out.get(job_id)
        out[job_id] = Pending(job_id, names | (earlier.partitions if earlier else frozenset()), int(priority),
                              start if _START.fullmatch(start) else None, reason[:80])
    return out


def spot_in(job_id: str, queue: dict[str, Pending]) -> Spot | None:
    """``job_id``'s place in ``queue`` (None when the queue does not list it, or it is not
    competing for nodes itself: its reason says what it waits for)."""
    me = queue.get(job_id)
    if me is None or me.reason in NOT_WAITING:
        return None
    rivals = [p for p in queue.values() if p.partitions & me.partitions and p.reason not in NOT_WAITING]
    ahead = [p for p in rivals if p.job_id != job_id and
             (p.priority > me.priority or (p.priority == me.priority and _id_key(p.job_id) < _id_key(job_id)))]
    waiting = len([p for p in rivals if p.job_id != job_id]) + 1
    return Spot(len(ahead) + 1, waiting, tuple(sorted(me.partitions)), me.start)


def spot(job_id: str, run: slurmclient.Run = slurmclient.run) -> Spot | None:
    """``job_id``'s place in the queue now (one squeue call); None when squeue does not answer
    or does not list it as pending."""
    proc = run(list(PENDING_ARGV), TIMEOUT_S)
    if proc.returncode != 0:
        return None
    return spot_in(job_id, parse_pending(proc.stdout))
