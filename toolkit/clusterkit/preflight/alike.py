"""A check that fails on every node alike is the check's fault or its environment's, not the nodes'.

``nvidia-smi`` missing from every node's PATH, a Python without numpy for ``preflight --perf``,
an srun step refused as a whole ("More processors requested than permitted"): every node then
reports the same problem, and excluding them all (or requeueing the job without them) would
only hide the cause.  :func:`common_fault` finds that case; the reports then mark no node bad,
give each node the verdict ``unjudged`` and say the cause in one line (:func:`worded`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from clusterkit.tooltext import printable

#: the verdict of every node of a report whose check failed on every node alike
UNJUDGED = "unjudged"
#: with fewer nodes, failing alike says nothing (one node's fault is its own)
MIN_NODES = 2
CAUSE_MAX = 300
_TASK = re.compile(r"\b(task|rank) [0-9]+")


def _same(host: str, line: str) -> str:
    """``line`` with what differs from node to node by nature (its name, its task numbers) masked."""
    return _TASK.sub(r"\1 N", line.replace(host, "NODE"))


def common_fault(outcomes: Iterable[tuple[str, bool, Sequence[str]]], min_nodes: int = MIN_NODES) -> str | None:
    """The cause when every node (at least ``min_nodes``) is bad with the same problem lines, else None.

    ``outcomes``: ``(host, bad, problem lines)`` per node.  The cause is the first node's lines,
    joined, bounded and printable.
    """
    seen: tuple[str, ...] | None = None
    first: Sequence[str] = ()
    count = 0
    for host, bad, lines in outcomes:
        if not bad or not lines:
            return None
        key = tuple(_same(host, line) for line in lines)
        if seen is None:
            seen, first = key, lines
        elif key != seen:
            return None
        count += 1
    if seen is None or count < min_nodes:
        return None
    return bounded("; ".join(first))


def bounded(cause: str) -> str:
    """One printable line of at most :data:`CAUSE_MAX` characters, cut at a word."""
    text = " ".join(printable(cause).split())
    if len(text) <= CAUSE_MAX:
        return text
    return text[:CAUSE_MAX - 3].rsplit(" ", 1)[0] + "..."


def worded(cause: str, nodes: int) -> str:
    """The report's one line about it."""
    who = "the node" if nodes == 1 else f"all {nodes} nodes"
    return (f"the check failed on {who} alike: {cause}: a fault of the check or its environment, "
            "not of the nodes; no node is marked bad")
