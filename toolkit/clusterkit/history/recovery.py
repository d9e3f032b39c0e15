"""The ``recovery`` source: the nodes the supervisor's recovery inside the allocation dropped.

The supervisor writes ``logs/attempts-<job>.r<restart>.json`` after each failed attempt it
judged (:mod:`clusterkit.supervise.attempts`): the nodes the attempt ran on and each node it
dropped, with why (``attempt N: doctor: <category>: <summary>``, or ``attempt N: Slurm reports
it down or failing``).  Each dropped node is one event of the job.  The files lie in a run
directory others may reach, so they are read as data: only those of the record's own job id
in its own run directory (the record names the files, never a file's content), through
:func:`clusterkit.supervise.attempts.read_noted` (bounded, every field checked); a file whose
restart is beyond the job's restart budget, or that names more nodes than the job's allocation
holds, is skipped, and so is a drop whose reason is not one the supervisor writes, each with a
note.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from clusterkit.history.store import Event
from clusterkit.scheduler import traits
from clusterkit.supervise import attempts
from clusterkit.supervise.replan import RELAUNCH

if TYPE_CHECKING:
    from clusterkit.scheduler.records import JobRecord

SOURCE = "recovery"
# the category of a node Slurm reported down or failing while the attempt ran: doctor's word for it
SLURM_DOWN = "slurm-node-failure"
_DOCTOR = re.compile(r"attempt [0-9]{1,7}: doctor: ([a-z][a-z0-9-]{0,63})(?::|$)")
_DOWN = re.compile(r"attempt [0-9]{1,7}: Slurm reports it down or failing")


def category_of(why: str) -> str | None:
    """The verdict a drop's reason names (one that drops a node), or None for any other text."""
    m = _DOCTOR.match(why)
    if m:
        return m.group(1) if m.group(1) in RELAUNCH else None
    return SLURM_DOWN if _DOWN.fullmatch(why) else None


def _count(plan: object, key: str) -> int | None:
    value = plan.get(key) if isinstance(plan, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def events_of(rec: JobRecord, at: str, hardware: frozenset[str]) -> tuple[list[Event], list[str]]:
    """One event per node an attempt of ``rec`` dropped (``hardware``: the categories that count
    toward keeping a node out), and one note per record or drop skipped."""
    if not traits(rec.scheduler).allocates:
        return [], []
    found, notes = attempts.read_noted(rec.run_dir, rec.job_id)
    allocated = rec.nnodes + (_count(rec.plan, "spares") or 0)
    max_restarts = _count(rec.plan, "max_restarts")
    by_restart: dict[int, list[attempts.Attempt]] = {}
    for restart, a in found:
        by_restart.setdefault(restart, []).append(a)
    events: list[Event] = []
    for restart, done in by_restart.items():
        name = attempts.path_for(rec.run_dir, rec.job_id, restart).name
        hosts = {h for a in done for h in (*a.nodes, *(d for d, _ in a.dropped))}
        if max_restarts is not None and restart > max_restarts:
            notes.append(f"{name}: restart {restart} is beyond the job's {max_restarts} restart(s); skipped")
            continue
        if len(hosts) > allocated:
            notes.append(f"{name}: names {len(hosts)} nodes, the job's allocation holds {allocated}; skipped")
            continue
        for a in done:
            for host, why in a.dropped:
                what = category_of(why)
                if what is None:
                    notes.append(f"{name}: attempt {a.attempt} dropped {host} for a reason clusterkit does not "
                                 f"write ({why[:60]!r}); skipped")
                    continue
                events.append(Event(host, at, SOURCE, what, what in hardware, rec.job_id, why))
    return events, [f"node history: job {rec.job_id}: {n}" for n in notes]
