"""One verdict as doctor reports it, and the evidence lines under it."""

from __future__ import annotations

import re
from typing import Any

from clusterkit.diagnose import catalogue
from clusterkit.diagnose.lines import iso
from clusterkit.diagnose.reader import Finding

MAX_EVIDENCE = 5


def key(f: Finding) -> tuple[float, int, str, int]:
    inf = float("inf")
    return (f.time if f.time is not None else inf, f.rank if f.rank is not None else 1 << 30, f.path, f.lineno)


def make(category: str, lead: Finding | None, evidence: list[str], *, node: str | None = None,
             rank: int | None = None, time: float | None = None, summary: str | None = None) -> dict[str, Any]:
    node = node if node is not None else (lead.node if lead else None)
    return {
        "category": category,
        "node": node,
        "rank": rank if rank is not None else (lead.rank if lead else None),
        "time": iso(time if time is not None else (lead.time if lead else None)),
        "summary": summary or catalogue.SUMMARIES[category],
        "evidence": evidence[:MAX_EVIDENCE],
        "advice": with_node(catalogue.advice(category), node),
    }


_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def with_node(advice: list[str], node: str | None) -> list[str]:
    """The advice with its ``NODE`` placeholder (``--exclude NODE``) as the node the verdict names,
    when that is a host name; unchanged otherwise."""
    if node is None or not _HOST.fullmatch(node):
        return advice
    return [re.sub(r"\bNODE\b", node, line) for line in advice]


def ev(f: Finding) -> str:
    return f"{f.where}: {f.text.strip()}"


def dedup(evidence: list[str]) -> list[str]:
    """Evidence lines, each message once (slurmstepd repeats itself on every sample)."""
    seen: set[str] = set()
    out = []
    for e in evidence:
        msg = e.split(": ", 1)[-1]
        if msg not in seen:
            seen.add(msg)
            out.append(e)
    return out


def rank_words(f: Finding) -> str:
    """How a summary names the finding's rank: the global one, else the process group's own
    (torch's ``[PG ID 2 ... Rank 0]`` numbers ranks within that group), else none."""
    if f.rank is not None:
        return f"rank {f.rank}"
    if f.group_rank is not None:
        pg, r = f.group_rank
        return f"rank {r} of process group {pg} (a group-local rank: the log names no global rank)"
    return "a rank"
