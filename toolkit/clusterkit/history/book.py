"""The node history of a site: read it, add to it, and keep its repeat offenders out of a plan.

Recording is never what a command is for: a history that cannot be written or read is a
warning line, and the command goes on (:class:`~clusterkit.history.store.HistoryError` is
caught here, never raised past this module).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterkit.errors import PlanError
from clusterkit.history import shared, sources
from clusterkit.history.store import Event, HistoryError, add, history_path, load
from clusterkit.history.summary import NodeSummary, kept_out, summarize
from clusterkit.scheduler import traits

if TYPE_CHECKING:
    from clusterkit.config.schema import Site
    from clusterkit.job.plan import Plan
    from clusterkit.preflight.report import Report
    from clusterkit.scheduler.records import JobRecord, RecordStore

RECENT_RECORDS = 200   # the newest job records refresh() reads (plus those whose job has not ended)
KEPT_OUT = "node history: keeping "   # how the plan's warning about kept-out nodes begins


@dataclass
class Book:
    """A site's node history as read now."""

    site: str
    path: Path
    events: list[Event] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _path(site: str, root: Path | None) -> Path:
    return history_path(site, root)


def record(site: str, events: Iterable[Event], root: Path | None = None) -> list[str]:
    """Add ``events`` to ``site``'s history; the warnings (one line each) instead of an error."""
    path = _path(site, root)
    try:
        return add(path, events).warnings()
    except HistoryError as exc:
        return [f"{exc}; not recorded"]


def record_preflight(site: str, report: Report, excluded: Iterable[str], job: str | None,
                     root: Path | None = None) -> list[str]:
    """The nodes a before-submit preflight kept out of ``job``."""
    return record(site, sources.from_report(report, excluded, job), root)


def record_diagnosis(rec: JobRecord, report: Mapping[str, Any], root: Path | None = None) -> list[str]:
    """The node doctor blamed for ``rec``'s failure, if it named one."""
    events = sources.from_diagnosis(rec, report)
    return record(rec.site, events, root) if events else []


def refresh(site: str, store: RecordStore | None = None, root: Path | None = None) -> list[str]:
    """Read the newest job records of ``site`` (and their run directories) for events the history
    lacks: the nodes their in-job preflights and their recovery inside the allocation dropped.
    Warnings (a record skipped, one line each), never an error."""
    from clusterkit.errors import RecordError
    from clusterkit.scheduler.records import RecordStore

    try:
        recs, _unreadable = (store or RecordStore()).recent(RECENT_RECORDS)
    except (RecordError, OSError) as exc:
        return [f"node history: job records not read ({exc})"]
    events: list[Event] = []
    notes: list[str] = []
    for rec in recs:
        if rec.site == site:
            found, noted = sources.from_record(rec)
            events += found
            notes += noted
    return notes + (record(site, events, root) if events else [])


def read(site: str, root: Path | None = None) -> Book:
    """``site``'s history as it is on disk (a bad file: no events, and a warning)."""
    path = _path(site, root)
    loaded = load(path)
    return Book(site, path, loaded.events, loaded.warnings())


def nodes(site: Site, *, store: RecordStore | None = None, root: Path | None = None) -> tuple[Book, list[NodeSummary]]:
    """``clusterkit nodes``: the history refreshed from the job records, per node; with the
    site's ``node_history.shared_dir``, the user's history copied there and other users' read."""
    warnings = refresh(site.name, store, root)
    book = read(site.name, root)
    book.warnings = warnings + book.warnings
    others: dict[str, list[Event]] = {}
    if site.node_history.shared_dir:
        book.warnings += _share(site.name, site.node_history.shared_dir, book.events)
        found = shared.read_others(site.node_history.shared_dir, site.name)
        book.warnings += found.warnings
        others = found.by_user
    return book, summarize(book.events, site.node_history, others=others)


def _share(site: str, shared_dir: str, events: list[Event]) -> list[str]:
    """The user's events into their file of the shared directory (readable by all)."""
    if shared.dir_problem(Path(shared_dir)) is not None:
        return []   # read_others says why
    path = shared.own_path(shared_dir, site)
    if path is None or not events:
        return []
    try:
        add(path, events, mode=0o644)
    except HistoryError as exc:
        return [f"{exc}; not shared"]
    return []


def keep_out(site: Site, plan: Plan, *, store: RecordStore | None = None, root: Path | None = None) -> Plan:
    """``plan`` with the site's repeat offenders (``node_history:`` keys) added to its exclude
    list, and a warning that names them with the evidence; unchanged on a local site, with
    ``--set node_history=false``, or ``node_history.exclude_after: 0``.  Nodes that would leave
    the job too few are not kept out (the warning says so); what could not be read is a warning."""
    if (not traits(site.scheduler.kind).allocates or not plan.settings.node_history
            or site.node_history.exclude_after == 0):
        return plan
    book, summaries = nodes(site, store=store, root=root)
    notes = list(book.warnings)
    candidates = set(plan.candidates)
    out = [s for s in kept_out(summaries) if s.node in candidates]
    if out:
        names = ", ".join(s.node for s in out)
        evidence = "; ".join(f"{s.node}: {s.evidence(site.node_history.window_days)}" for s in out)
        try:
            plan = plan.excluding(s.node for s in out)
            notes.append(f"{KEPT_OUT}{names} out of the job (#SBATCH --exclude): {evidence}; "
                         "--set node_history=false lets them in")
        except PlanError as exc:
            notes.append(f"node history: not keeping {names} out ({exc}): {evidence}")
    return replace(plan, warnings=(*plan.warnings, *notes)) if notes else plan


def kept_out_note(warnings: Iterable[str]) -> str | None:
    """The nodes the node history kept out of a plan (from its warning), for the choices line."""
    for w in warnings:
        if w.startswith(KEPT_OUT):
            return w[len(KEPT_OUT):].split(" out of the job", 1)[0]
    return None
