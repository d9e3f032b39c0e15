"""Slurm hostlist helpers on ClusterShell's NodeSet (``gpu[001-064]`` <-> host names)."""

from __future__ import annotations

from typing import Iterable

from ClusterShell.NodeSet import NodeSet, NodeSetParseError


class HostlistError(ValueError):
    """A hostlist expression that NodeSet cannot parse."""


def parse(hostlist: str) -> NodeSet:
    """Parse a Slurm-style hostlist; raise HostlistError with NodeSet's reason."""
    text = hostlist.strip()
    if not text:
        raise HostlistError("empty hostlist")
    try:
        nodeset = NodeSet(text)
    except (NodeSetParseError, ValueError) as exc:
        raise HostlistError(f"bad hostlist {hostlist!r}: {exc}") from None
    if len(nodeset) == 0:
        raise HostlistError(f"hostlist {hostlist!r} names no hosts")
    return nodeset


def expand(hostlist: str) -> list[str]:
    """``gpu[01-03]`` -> ``['gpu01', 'gpu02', 'gpu03']`` in NodeSet's (sorted) order."""
    return list(parse(hostlist))


def fold(hosts: Iterable[str]) -> str:
    """``['gpu01', 'gpu02']`` -> ``gpu[01-02]``; an empty input folds to ``''``."""
    hosts = list(hosts)
    return str(NodeSet.fromlist(hosts)) if hosts else ""


def count(hostlist: str) -> int:
    return len(parse(hostlist))
