"""Which node a perf task's figures belong to (docs/architecture.md §3, whether a node is fast
enough).  A task's figure lines name its host, but the task prints them itself: a node whose
tasks claim another host's name could mark that host slow.  What a task cannot forge is its
srun ``--label`` (the task number, checked against the line's rank by ``perf.parse_output``)
and Slurm's block layout of ``--ntasks-per-node``: tasks ``k*T .. k*T+T-1`` share one node.
So the claims must agree with the layout: every task of one node names the same host, no two
nodes name the same host, every line of a task names the host of its first line, and a pair
figure is reported by one of the pair's ends.  Figures of tasks whose claims collide are not
used, and the host they claim is failed with the reason, never judged on them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clusterkit.hostlist import expand, fold
from clusterkit.tooltext import printable

TEXT_MAX = 400   # characters of a task's text field kept


def label_of(line: str) -> tuple[int | None, str]:
    """srun --label's ``"  3: text"`` -> (3, "text"); (None, line) for srun's own lines."""
    head, sep, rest = line.partition(": ")
    if sep and head.strip().isascii() and head.strip().isdigit() and len(head) < 12:
        return int(head.strip()), rest
    return None, line


def _ranks(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in sorted(ranks))


def attribute(events: Sequence[dict[str, Any]], tasks_per_node: int,
              hosts: Sequence[str]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The events whose host claims hold, and the hosts whose figures were set aside, each with
    why.  Where two nodes claim one host, the node Slurm's layout puts at that host's place
    (the ``k``-th node of the step's sorted host list runs tasks ``k*T ..``) keeps it; without
    such a node neither does."""
    per = max(1, tasks_per_node)
    order = expand(fold(hosts)) if hosts else []
    claim: dict[int, str] = {}
    kept: list[dict[str, Any]] = []
    for ev in events:
        r, host = int(ev["rank"]), str(ev["host"])
        if claim.setdefault(r, host) != host:
            continue                      # a task's later line naming another host
        if ev["ev"] == "pair" and host not in ev["pair"]:
            continue                      # a pair figure from a node outside the pair
        # a task's own words (its error, backend, checksum) reach the terminal: one bounded printable line
        kept.append({k: printable(v)[:TEXT_MAX] if isinstance(v, str) else v for k, v in ev.items()})
    blocks: dict[int, dict[str, list[int]]] = {}
    for r, host in claim.items():
        blocks.setdefault(r // per, {}).setdefault(host, []).append(r)
    conflicts: dict[str, str] = {}
    bad: set[int] = set()

    def set_aside(k: int, ranks: list[int], host: str, why: str) -> None:
        bad.update(ranks)
        conflicts.setdefault(host, f"tasks {_ranks(ranks)} claimed to be {host}, {why}: their figures are not used")
        if k < len(order) and order[k] != host:
            conflicts.setdefault(order[k], f"its tasks ({_ranks(ranks)}) claimed to be {host}, {why}")

    claimants: dict[str, list[int]] = {}
    for k, named in blocks.items():
        for host, ranks in named.items():
            if len(named) > 1:
                set_aside(k, ranks, host, f"while other tasks of their node claim {len(named) - 1} other host(s)")
            else:
                claimants.setdefault(host, []).append(k)
    for host, ks in claimants.items():
        if len(ks) > 1:
            placed = [k for k in ks if k < len(order) and order[k] == host]
            for k in ks:
                if k not in placed:
                    set_aside(k, blocks[k][host], host, f"as did the tasks of {len(ks) - 1} other node(s)")
            if placed:
                conflicts.pop(host, None)
    return [ev for ev in kept if int(ev["rank"]) not in bad], conflicts
