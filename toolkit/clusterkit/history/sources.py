"""What clusterkit already records, as node-history events (one reader per source).

- ``preflight``: a before-submit preflight's report (:func:`from_report`), the failed nodes the
  gate kept out of the job it submitted;
- ``in-job``: the nodes a job's in-job preflight dropped, read back from its run directory's
  selections (``logs/nodes-<job>.r<restart>.json``, validated by :mod:`clusterkit.preflight.choose`)
  by :func:`from_record`, for every record :func:`clusterkit.history.refresh` looks at;
- ``doctor``: the node doctor's verdict blamed for a job's failure (:func:`from_diagnosis`);
- ``recovery``: the nodes the supervisor's recovery inside the allocation dropped, read back
  from the job's ``logs/attempts-<job>.r<restart>.json`` (:mod:`clusterkit.history.recovery`).

A further source is one more name in :data:`clusterkit.history.store.SOURCES` and one more
reader in :data:`RECORD_READERS`; nothing else changes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterkit.history import recovery
from clusterkit.history.store import Event, now_utc
from clusterkit.scheduler import traits

if TYPE_CHECKING:
    from clusterkit.preflight.report import Report
    from clusterkit.scheduler.records import JobRecord

# the checks whose failure says the node's hardware is faulty (a missing module, a mount or a
# full disk is the node's setup, and counts as a failure but not toward keeping the node out)
HARDWARE_CHECKS = frozenset({
    "gpu.present", "gpu.count", "gpu.ecc", "gpu.row_remap", "gpu.pcie", "gpu.clocks", "gpu.nvlink",
    "gpu.xid", "ib.hcas", "ib.ports", "ib.rate", "ib.counters",
})
# doctor's categories that blame a node's hardware (the verdict names the node)
HARDWARE_CATEGORIES = frozenset({"gpu-hardware", "slurm-node-failure"})
# the perf judge's verdicts about a node itself
HARDWARE_VERDICTS = frozenset({"slow", "wrong-result"})
# what a reader of job records found: events, and one line per thing it skipped
Found = tuple[list[Event], list[str]]
_CHECK = re.compile(r"([a-z][a-z0-9_]*\.[a-z0-9_]+)\b")


def _what_of(line: str, fallback: str) -> str:
    m = _CHECK.match(line)
    return m.group(1) if m else fallback


def from_report(report: Report, excluded: Iterable[str], job: str | None, at: str | None = None) -> list[Event]:
    """One event per failed check of each node in ``excluded`` (the nodes the gate kept out);
    an unreachable node is one ``unreachable`` event, which never counts as hardware."""
    from clusterkit.preflight.engine import Status

    at = at or now_utc()
    wanted = set(excluded)
    events: list[Event] = []
    for result in report.nodes:
        if result.host not in wanted:
            continue
        if not result.reachable:
            events.append(Event(result.host, at, "preflight", "unreachable", False, job, result.error or ""))
            continue
        failed = [c for c in result.checks if c.status is Status.FAIL]
        for c in failed:
            events.append(Event(result.host, at, "preflight", c.check, c.check in HARDWARE_CHECKS, job,
                                f"{c.check}: {c.message}"))
        if not failed:
            events.append(Event(result.host, at, "preflight", "failed", False, job, result.error or ""))
    return events


def from_dropped(rec: JobRecord, dropped: Iterable[Any], at: str) -> list[Event]:
    """The in-job preflight's dropped nodes (``NodeVerdict``s) of ``rec`` as events."""
    events = []
    for v in dropped:
        what = _what_of(v.reason, v.verdict) if v.verdict == "failed" else v.verdict
        hardware = what in HARDWARE_CHECKS or v.verdict in HARDWARE_VERDICTS
        events.append(Event(v.host, at, "in-job", what, hardware, rec.job_id, v.reason))
    return events


def from_diagnosis(rec: JobRecord, report: Mapping[str, Any], at: str | None = None) -> list[Event]:
    """The node doctor's verdict on ``rec`` names, with its category (none for a verdict that
    names no node, or a job that did not fail)."""
    verdict = report.get("verdict")
    if not isinstance(verdict, Mapping):
        return []
    node, category = verdict.get("node"), verdict.get("category")
    if not isinstance(node, str) or not isinstance(category, str) or category == "ok":
        return []
    summary = verdict.get("summary")
    return [Event(node, at or now_utc(), "doctor", category, category in HARDWARE_CATEGORIES, rec.job_id,
                  summary if isinstance(summary, str) else "")]


def _in_job(rec: JobRecord) -> Found:
    from clusterkit.preflight.choose import ChooseError, dropped_nodes

    if not traits(rec.scheduler).allocates:
        return [], []
    spares = rec.plan.get("spares", 0) if isinstance(rec.plan, dict) else 0
    allocated = rec.nnodes + spares if isinstance(spares, int) and not isinstance(spares, bool) else None
    try:   # only selections of an allocation of the job's size: a forged file cannot outgrow it
        dropped = dropped_nodes(Path(rec.run_dir), rec.job_id, allocated)
    except (ChooseError, OSError):
        return [], []
    return from_dropped(rec, dropped, _when(rec)), []


def _recovery(rec: JobRecord) -> Found:
    return recovery.events_of(rec, _when(rec), HARDWARE_CATEGORIES)


def _when(rec: JobRecord) -> str:
    return rec.submitted_at if _is_time(rec.submitted_at) else now_utc()


def _is_time(text: str) -> bool:
    return bool(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z", text))


# readers of a job's record and run directory; each returns the events it finds (none is fine)
# and a line for each thing it skipped
RECORD_READERS: tuple[Callable[[JobRecord], Found], ...] = (_in_job, _recovery)


def from_record(rec: JobRecord) -> Found:
    """Every event the readers of :data:`RECORD_READERS` find for ``rec``, and their notes."""
    events: list[Event] = []
    notes: list[str] = []
    for reader in RECORD_READERS:
        found, noted = reader(rec)
        events += found
        notes += noted
    return events, notes
