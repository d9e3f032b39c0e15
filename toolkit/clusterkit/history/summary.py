"""A node history counted per node, and which nodes a new job keeps out (pure: events in)."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from clusterkit import hostlist
from clusterkit.config.history_keys import NodeHistoryKeys
from clusterkit.history.store import Event, parse_time

MAX_JOBS_SHOWN = 10   # a node's jobs listed, newest first; the count says how many more


@dataclass(frozen=True)
class NodeSummary:
    """One node's record of failures."""

    node: str
    failures: int                    # every event
    recent_hardware: int             # hardware events within the window
    last_at: str                     # the newest event's time
    last_what: str                   # the newest event's verdict
    last_detail: str
    verdicts: tuple[tuple[str, int], ...]   # (verdict, count), most frequent first
    sources: tuple[str, ...]
    jobs: tuple[str, ...]            # newest first, at most MAX_JOBS_SHOWN
    job_count: int
    kept_out: bool                   # a new job keeps it out (site keys, allow list)
    allowed: bool                    # in the site's allow list
    other_users: int = 0             # other users whose shared history has a hardware failure here in the window

    def evidence(self, window_days: float) -> str:
        """``3 hardware failures in 30 days: gpu-hardware x3 (jobs 103, 102, 101)``."""
        counts = ", ".join(f"{what} x{n}" if n > 1 else what for what, n in self.verdicts[:3])
        jobs = f" (jobs {', '.join(self.jobs[:3])}{', ...' if self.job_count > 3 else ''})" if self.jobs else ""
        days = f"{window_days:g}"
        return f"{self.recent_hardware} hardware failure(s) in {days} day(s): {counts}{jobs}"

    def drain_command(self, window_days: float) -> str:
        """What an admin would run to take the node out of service (printed, never run)."""
        reason = f"clusterkit: {self.evidence(window_days)}"[:200]
        return f"scontrol update NodeName={shlex.quote(self.node)} State=DRAIN Reason={shlex.quote(reason)}"

    def to_dict(self, window_days: float) -> dict[str, Any]:
        return {"node": self.node, "failures": self.failures, "recent_hardware": self.recent_hardware,
                "last_failure": self.last_at, "last_verdict": self.last_what, "last_detail": self.last_detail,
                "verdicts": dict(self.verdicts), "sources": list(self.sources), "jobs": list(self.jobs),
                "job_count": self.job_count, "kept_out": self.kept_out, "allowed": self.allowed,
                "other_users": self.other_users,
                "drain_command": self.drain_command(window_days) if self.kept_out else None}


def allowed_hosts(keys: NodeHistoryKeys) -> set[str]:
    """The site's ``node_history.allow`` hosts (validated when the site was loaded)."""
    return set(hostlist.expand(keys.allow)) if keys.allow else set()


def summarize(events: Iterable[Event], keys: NodeHistoryKeys, now: datetime | None = None,
              others: Mapping[str, Sequence[Event]] | None = None) -> list[NodeSummary]:
    """One summary per node with events, the most recent hardware failures first.  ``others``
    (other users' events, by user) count at most one hardware failure per user and node within
    the window: one user alone cannot keep a node out of everyone's jobs.  doctor's verdict on a
    job and the recovery's drop of the same node for the same verdict in that job are one failure."""
    now = now or datetime.now(timezone.utc)
    since = now - timedelta(days=keys.window_days)
    allow = allowed_hosts(keys)
    by_node: dict[str, list[Event]] = {}
    seen: dict[tuple[str, str, str], Event] = {}
    for e in events:
        if e.job is not None:   # doctor's verdict on a job and the recovery's drop of it: one failure
            first = seen.setdefault((e.node, e.job, e.what), e)
            if first is not e and {first.source, e.source} == {"doctor", "recovery"}:
                continue
        by_node.setdefault(e.node, []).append(e)
    shared: dict[str, list[Event]] = {}
    for user_events in (others or {}).values():
        newest: dict[str, Event] = {}
        for e in user_events:
            if e.hardware and parse_time(e.at) >= since and (e.node not in newest or e.at > newest[e.node].at):
                newest[e.node] = e
        for node, e in newest.items():
            shared.setdefault(node, []).append(e)
            by_node.setdefault(node, [])
    out = []
    for node, own in by_node.items():
        own.sort(key=lambda e: e.at)
        theirs = shared.get(node, [])
        evs = sorted([*own, *theirs], key=lambda e: e.at)
        recent = [e for e in evs if e.hardware and parse_time(e.at) >= since]
        jobs = list(dict.fromkeys(e.job for e in reversed(own) if e.job))   # the user's own jobs
        counted = Counter(e.what for e in (recent or evs))
        kept = keys.exclude_after > 0 and len(recent) >= keys.exclude_after and node not in allow
        out.append(NodeSummary(
            node=node, failures=len(evs), recent_hardware=len(recent), last_at=evs[-1].at, last_what=evs[-1].what,
            last_detail=evs[-1].detail, verdicts=tuple(counted.most_common()),
            sources=tuple(sorted({e.source for e in evs})), jobs=tuple(jobs[:MAX_JOBS_SHOWN]), job_count=len(jobs),
            kept_out=kept, allowed=node in allow, other_users=len(theirs)))
    out.sort(key=lambda s: (-s.recent_hardware, -s.failures, s.node))
    return out


def kept_out(summaries: Sequence[NodeSummary]) -> list[NodeSummary]:
    """The nodes a new job keeps out."""
    return [s for s in summaries if s.kept_out]
