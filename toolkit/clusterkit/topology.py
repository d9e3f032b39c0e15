"""Slurm's network topology as ``scontrol show topology`` prints it, and the placement decisions
that rest on it: which leaf switch (topology/tree) or block (topology/block) each node is under,
hosts ordered so that the nodes of one switch are contiguous, spares taken under the switch of
the node they replace (docs/architecture.md §3, "Placement by topology").  Pure and total: text
in, values out; nothing here runs a command.

topology/tree prints one line per switch, ``SwitchName=s0 Level=0 LinkSpeed=1 Nodes=tux[0-1]``,
a higher switch with ``Switches=`` and every node below it in ``Nodes=``; topology/block one line
per base block, ``BlockName=b1 BlockIndex=0 Nodes=tux[0-3]`` (``BlockSize=4`` after it in 24.11),
and from 24.11 one per aggregated block, ``AggregatedBlock=b[1-2] BlockIndex=3 Nodes=tux[0-7]
BlockSize=8`` (read as a block of level 1 whose children are the blocks it names).  A node's group
is its leaf: its lowest-level switch, or the base block holding it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from clusterkit.hostlist import HostlistError, check_host, expand
from clusterkit.slurmtext import lines as slurm_lines
from clusterkit.slurmtext import split_record
from clusterkit.tooltext import parse_int, printable

#: what is read of one ``scontrol show topology`` answer: bytes, lines, nodes in one group
MAX_TEXT = 8 << 20
MAX_LINES = 100_000
MAX_NODES = 200_000
MAX_UNPARSED = 100

Plugin = Literal["tree", "block"]


@dataclass(frozen=True)
class Group:
    """One switch (tree) or block: its name, level (a block's is 0) and the nodes under it."""

    name: str
    level: int
    nodes: tuple[str, ...]
    children: tuple[str, ...] = ()   # a switch's child switches (``Switches=``)


@dataclass(frozen=True)
class Topology:
    """What ``scontrol show topology`` printed: the plugin its lines are of (None: no switch or
    block line), the groups, and the lines that were neither (kept, never a crash)."""

    plugin: Plugin | None
    groups: tuple[Group, ...]
    unparsed: tuple[str, ...] = ()

    @property
    def leaves(self) -> tuple[Group, ...]:
        """The groups nodes are placed by: a tree's lowest-level switches, every block."""
        if not self.groups:
            return ()
        low = min(g.level for g in self.groups)
        return tuple(g for g in self.groups if g.level == low or not g.children)

    def group_of(self) -> dict[str, str]:
        """Each node's group: the leaf switch or block holding it (of several, the one with the
        fewest nodes); a node under no leaf (a partial listing: ``scontrol show topology NODE``)
        is left out."""
        best: dict[str, tuple[int, int, str]] = {}
        for g in self.leaves:
            rank = (g.level, len(g.nodes), g.name)
            for host in g.nodes:
                if host not in best or rank < best[host]:
                    best[host] = rank
        return {host: rank[2] for host, rank in best.items()}

    def sizes(self) -> dict[str, int]:
        """Nodes per leaf group, by name."""
        return {g.name: len(g.nodes) for g in self.leaves}


def _names(value: str, *, limit: int = MAX_NODES) -> tuple[str, ...] | None:
    """A ``Nodes=``/``Switches=`` host list expanded; None when it is not one (or too long)."""
    if value in ("", "(null)"):
        return ()
    try:
        names = expand(value)
    except HostlistError:
        return None
    if len(names) > limit:
        return None
    try:
        return tuple(check_host(h) for h in names)
    except HostlistError:
        return None


def parse(text: str) -> Topology:
    """``scontrol show topology`` (any Slurm since 2.x: tree; 23.11+: block) -> :class:`Topology`.

    A line is a switch (``SwitchName=``) or a block (``BlockName=``, ``AggregatedBlock=``) whose
    name is a host name (an aggregated block's: a host list) and whose ``Nodes=``/``Switches=`` are
    host lists; anything else, a second plugin's lines among the first's included, goes to
    ``unparsed`` (the first :data:`MAX_UNPARSED`).  Bounded: :data:`MAX_TEXT` characters,
    :data:`MAX_LINES` lines, :data:`MAX_NODES` nodes a line.
    """
    groups: list[Group] = []
    unparsed: list[str] = []
    plugin: Plugin | None = None
    seen: set[str] = set()
    for line in slurm_lines(text[:MAX_TEXT])[:MAX_LINES]:
        if not line.strip():
            continue
        g, kind = _group(line.strip())
        if g is None or kind is None or (plugin is not None and kind != plugin) or g.name in seen:
            if len(unparsed) < MAX_UNPARSED:
                unparsed.append(printable(line)[:300])
            continue
        plugin = kind
        seen.add(g.name)
        groups.append(g)
    return Topology(plugin, tuple(groups), tuple(unparsed))


_NAME_KEYS = ("SwitchName", "BlockName", "AggregatedBlock")


def _group(line: str) -> tuple[Group | None, Plugin | None]:
    kv = split_record(line)
    keys = [k for k in _NAME_KEYS if k in kv]
    if len(keys) != 1:
        return None, None
    kind: Plugin = "tree" if keys[0] == "SwitchName" else "block"
    name = kv[keys[0]]
    nodes = _names(kv.get("Nodes", ""))
    level: int | None
    if keys[0] == "AggregatedBlock":   # named by the blocks it joins, a host list
        children, level = _names(name, limit=MAX_LINES), 1
        if not children or len(name) > 1000:
            return None, None
    else:
        try:
            name = check_host(name)
        except HostlistError:
            return None, None
        children = _names(kv.get("Switches", ""), limit=MAX_LINES) if kind == "tree" else ()
        level = parse_int(kv["Level"]) if "Level" in kv else 0
    if nodes is None or children is None or level is None or not 0 <= level <= 64:
        return None, None
    return Group(name, level, nodes, children), kind


def order_hosts(hosts: Sequence[str], group_of: Mapping[str, str]) -> list[str]:
    """``hosts`` with the nodes of one group contiguous: groups in the order their first node
    comes in ``hosts``, nodes within a group in their order there.  The first host stays first
    (the job's head, Slurm's node 0); a node in no group is a group of its own."""
    order: dict[str, list[str]] = {}
    for i, host in enumerate(hosts):
        order.setdefault(group_of.get(host, f"\0{i}"), []).append(host)
    return [h for members in order.values() for h in members]


def pick_spares(dropped: Sequence[str], spares: Sequence[str], group_of: Mapping[str, str]) -> list[str]:
    """One spare per dropped node, in the order of ``dropped``: an unused spare under the dropped
    node's group first, else the first unused spare (``spares`` in order); fewer when short."""
    left = list(spares)
    out: list[str] = []
    for host in dropped:
        if not left:
            break
        where = group_of.get(host)
        pick = next((s for s in left if where is not None and group_of.get(s) == where), left[0])
        left.remove(pick)
        out.append(pick)
    return out


def describe(hosts: Iterable[str], group_of: Mapping[str, str]) -> str:
    """``leaf1: 2, leaf2: 2`` (nodes of ``hosts`` per group, in order; ``?`` for none), for a log line."""
    counts: dict[str, int] = {}
    for host in hosts:
        key = group_of.get(host, "?")
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{name}: {n}" for name, n in counts.items())
