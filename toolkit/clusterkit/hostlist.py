"""Slurm hostlist helpers on ClusterShell's NodeSet (``gpu[001-064]`` <-> host names).

Host lists are data from site files, users and Slurm, so they are checked against a strict
grammar before ClusterShell sees them, and NodeSet runs with ``RESOLVER_NOGROUP``: its default
group resolver reads ``groups.conf``, whose upcalls paste a ``@group`` name into ``sh -c``, and
expands ``*`` to whatever hosts that configuration lists.  With no resolver the parser never
reaches those code paths (``ParsingEngine.parse_string`` tests ``self.group_resolver`` first).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetParseError

#: Most hosts one host list may name: ``n[1-10000000]`` would otherwise take seconds and gigabytes.
MAX_HOSTS = 100_000
#: Longest host list expression accepted, in characters.
MAX_EXPRESSION = 64 * 1024

# One comma-separated item: name text and bracketed ranges (``r[1-2]n[01-08]-ib``), nothing else:
# no '@group', no '*' or '?', no ClusterShell set operators ('!', '&', '^'), no spaces or quotes.
_ITEM = re.compile(r"(?:[A-Za-z0-9._-]+|\[[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*\])+")
_RANGES = re.compile(r"\[([0-9,-]+)\]")
# RFC 1123 labels (underscores tolerated, as Slurm does), at most 63 characters each, 253 in all.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


class HostlistError(ValueError):
    """A hostlist expression that is not a plain Slurm hostlist of valid host names."""


def _items(text: str) -> list[str]:
    """Split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return items


def _item_count(item: str, hostlist: str) -> int:
    n = 1
    for ranges in _RANGES.findall(item):
        size = 0
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if hi and int(hi) < int(lo):
                raise HostlistError(f"bad hostlist {hostlist!r}: range {part!r} runs backwards")
            size += int(hi or lo) - int(lo) + 1
        n *= size
    return n


def check_host(host: str) -> str:
    """One host name, or HostlistError naming what is wrong with it."""
    if len(host) > 253 or not _HOST.fullmatch(host):
        shown = host if len(host) <= 80 else host[:77] + "..."
        raise HostlistError(f"{shown!r} is not a valid host name (labels of letters, digits, '-' or '_', "
                            f"at most 63 characters each, separated by '.')")
    return host


def is_host(host: str) -> bool:
    """Whether ``host`` is one valid host name (:func:`check_host` without the error)."""
    try:
        check_host(host)
    except HostlistError:
        return False
    return True


def parse(hostlist: str) -> NodeSet:
    """Parse a Slurm-style hostlist; raise HostlistError naming what is wrong."""
    text = hostlist  # not stripped: a newline or space in a host list is an error, not padding
    if not text:
        raise HostlistError("empty hostlist")
    if len(text) > MAX_EXPRESSION:
        raise HostlistError(f"hostlist is {len(text)} characters long; the limit is {MAX_EXPRESSION}")
    total = 0
    for item in _items(text):
        if not _ITEM.fullmatch(item):
            shown = item if len(item) <= 80 else item[:77] + "..."
            raise HostlistError(f"bad hostlist {shown!r}: use host names and [a-b,c] ranges only "
                                "(no '@group', '*', spaces, quotes or other characters)")
        total += _item_count(item, text)
        if total > MAX_HOSTS:
            raise HostlistError(f"hostlist names more than {MAX_HOSTS} hosts (the limit)")
    try:
        nodeset = NodeSet(text, resolver=RESOLVER_NOGROUP)
    except (NodeSetParseError, ValueError) as exc:
        raise HostlistError(f"bad hostlist {hostlist!r}: {exc}") from None
    if len(nodeset) == 0:
        raise HostlistError(f"hostlist {hostlist!r} names no hosts")
    for host in nodeset:
        check_host(host)
    return nodeset


def expand(hostlist: str) -> list[str]:
    """``gpu[01-03]`` -> ``['gpu01', 'gpu02', 'gpu03']`` in NodeSet's (sorted) order."""
    return list(parse(hostlist))


def fold(hosts: Iterable[str]) -> str:
    """``['gpu01', 'gpu02']`` -> ``gpu[01-02]``; an empty input folds to ``''``."""
    hosts = list(hosts)
    return str(NodeSet.fromlist(hosts, resolver=RESOLVER_NOGROUP)) if hosts else ""

