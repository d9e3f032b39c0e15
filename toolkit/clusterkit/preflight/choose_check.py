"""A node selection read back (``logs/nodes-<job>.r<restart>.json``) is a file in a run directory
others may reach: before ``status``, ``doctor``, ``submit --exclude-from`` or the next restart's
choice uses it, its parts must agree with each other (docs/architecture.md §3, which nodes).
A forged file can then only name nodes of an allocation of the job's own size, never a list
that outgrows it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class _Host(Protocol):
    @property
    def host(self) -> str: ...


class Parts(Protocol):
    """The parts of a selection (:class:`clusterkit.preflight.choose.Selection`) checked here."""

    @property
    def allocation(self) -> Sequence[str]: ...
    @property
    def wanted(self) -> int: ...
    @property
    def spares(self) -> int: ...
    @property
    def outcome(self) -> str: ...
    @property
    def chosen(self) -> Sequence[str]: ...
    @property
    def dropped(self) -> Sequence[_Host]: ...
    @property
    def unused(self) -> Sequence[str]: ...
    @property
    def exclude(self) -> Sequence[str]: ...


def problem(sel: Parts) -> str | None:
    """What makes ``sel`` inconsistent, or None."""
    alloc = set(sel.allocation)
    if len(alloc) != len(sel.allocation):
        return "the allocation lists a node twice"
    if not 1 <= sel.wanted <= len(alloc) or sel.spares >= len(alloc):
        return f"wanted {sel.wanted} and spares {sel.spares} do not fit an allocation of {len(alloc)} nodes"
    dropped = [v.host for v in sel.dropped]
    parts = (("chosen", list(sel.chosen)), ("dropped", dropped), ("unused", list(sel.unused)))
    seen: set[str] = set()
    for name, hosts in parts:
        outside = [h for h in hosts if h not in alloc]
        if outside:
            return f"{name} names {outside[0]}, which is not in the allocation"
        if seen & set(hosts) or len(set(hosts)) != len(hosts):
            return f"{name} repeats a node"
        seen |= set(hosts)
    if len(sel.chosen) != (sel.wanted if sel.outcome == "launch" else 0):
        return f"{sel.outcome} with {len(sel.chosen)} chosen nodes of {sel.wanted} wanted"
    if sel.outcome != "launch" and not set(dropped) <= set(sel.exclude):
        return "a dropped node is missing from the exclusions"
    return None
