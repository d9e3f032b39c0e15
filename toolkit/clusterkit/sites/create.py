"""``sites init``: a commented, valid site config from what Slurm (and the probe) report.

Facts are written as values with a comment saying where they came from; what neither Slurm nor
the probe can tell is a commented placeholder, listed in ``Draft.missing``; a value the schema
needs but nobody reported is written conservatively and marked ``# unverified``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from clusterkit import hostlist
from clusterkit.errors import InputError
from clusterkit.nodes import parsers as P
from clusterkit.nodes import sections as S
from clusterkit.nodes.facts import NodeFacts
from clusterkit.sites import slurm_text as T
from clusterkit.sites.facts import ClusterFacts, group_types
from clusterkit.sites.writer import emit
from clusterkit.slurmtext import parse_time
from clusterkit.tooltext import printable

# kernel file-system type -> the storage type a site declares (nfs4 -> nfs), from the one table
_FSTYPES = {fstype: kind for kind, fstypes in S.FSTYPES.items() for fstype in fstypes}


@dataclass
class Draft:
    """The site file's text and what the admin must still fill in."""

    text: str
    missing: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)  # probed nodes that did not answer
    companions: dict[str, str] = field(default_factory=dict)  # partial files it extends: name -> text
    expected: dict[tuple[str, ...], object] = field(default_factory=dict)  # key path -> value written


class _Out:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.missing: list[str] = []
        self.unverified: list[str] = []
        self.expected: dict[tuple[str, ...], object] = {}

    def put(self, indent: int, text: str, why: str = "") -> None:
        """One line; text from Slurm or nodes reaches comments only through printable (one line,
        no control characters), values only through :meth:`value` (the YAML emitter)."""
        pad = "  " * indent + (printable(text) if text.lstrip().startswith("#") else text)
        self.lines.append(f"{pad:<40} # {printable(why)}" if why else pad)

    def value(self, indent: int, path: str, value: object, why: str = "") -> None:
        """``key: value`` written by the YAML emitter; the draft is read back against it."""
        self.put(indent, f"{path.rsplit('.', 1)[-1]}: {emit(value, quoted=isinstance(value, str))}", why)
        self.expected[tuple(path.split("."))] = value

    def todo(self, indent: int, key_path: str, text: str, why: str) -> None:
        self.put(indent, f"# {text}", why)
        self.missing.append(f"{key_path}: {why}")

    def guess(self, indent: int, key_path: str, text: str, why: str) -> None:
        self.put(indent, text, f"unverified: {why}")
        self.unverified.append(f"{key_path}: {why}")


def _q(value: str) -> str:
    return emit(value, quoted=True)


def pick_nodes(facts: ClusterFacts, partition: T.Partition | None, expr: str | None) -> list[T.Node]:
    """The nodes to describe: one node type, or a InputError listing the types and their hosts."""
    nodes = facts.nodes_of(partition)
    if expr:
        try:
            wanted = set(hostlist.expand(expr))
        except hostlist.HostlistError as exc:
            raise InputError(f"--nodelist: {exc}") from None
        unknown = sorted(wanted - {n.name for n in nodes})
        if unknown:
            where = f"partition {partition.name}" if partition else "the cluster"
            raise InputError(f"--nodelist: {hostlist.fold(unknown)} not in {where}")
        nodes = [n for n in nodes if n.name in wanted]
    if not nodes:
        raise InputError(f"partition {partition.name if partition else '?'} has no nodes")
    types = group_types(nodes)
    if len(types) > 1:
        listing = "; ".join(f"{hostlist.fold(h)}: {t.describe()}" for t, h in types.items())
        raise InputError(f"{'partition ' + partition.name if partition else 'the cluster'} has {len(types)} node types "
                         f"({listing}); pick one with --nodelist")
    return nodes


def render(name: str, facts: ClusterFacts, partition: T.Partition | None, nodes: Sequence[T.Node],
           probed: Mapping[str, NodeFacts] | None) -> Draft:
    """The site file for ``nodes`` (all of one type)."""
    out = _Out()
    first = nodes[0]
    where = f"partition {partition.name}" if partition else "all nodes"
    out.put(0, f"# clusterkit site config for Slurm cluster {facts.cluster or '?'}, {where}.")
    out.put(0, "# Written by `clusterkit sites init` from scontrol show config/partition/node"
               + (" and a probe of every node." if probed else "."))
    out.put(0, "# Check it with `clusterkit sites drift` (cron) and `clusterkit sites validate`.")
    out.put(0, f"name: {_q(name)}")
    _scheduler(out, facts, partition)
    _nodes(out, nodes, first, probed)
    _software(out, probed)
    _network(out, probed)
    _topology(out, facts, nodes)
    _storage(out, probed)
    out.todo(0, "cost", "cost: {gpu_hour: 2.5, currency: USD}", "GPU-hour price: not known to Slurm")
    return Draft("\n".join(out.lines) + "\n", out.missing, out.unverified, expected=out.expected)


def _scheduler(out: _Out, facts: ClusterFacts, partition: T.Partition | None) -> None:
    out.put(0, "scheduler:")
    out.put(1, "kind: slurm")
    if facts.cluster:
        out.value(1, "scheduler.cluster", facts.cluster, "ClusterName")
    if partition is not None:
        out.value(1, "scheduler.partition", partition.name)
    out.todo(1, "scheduler.account", "account: ACCOUNT", "the account jobs are charged to: not in Slurm's config")
    limit = partition.max_time_s if partition else None
    default = parse_time(partition.default_time) if partition else None
    if partition is not None and default is not None and default != float("inf"):
        out.value(1, "scheduler.time", partition.default_time, "partition DefaultTime")
    elif partition is not None and limit is not None and limit != float("inf"):
        out.value(1, "scheduler.time", partition.max_time, "partition MaxTime")
    else:
        out.guess(1, "scheduler.time", 'time: "01:00:00"', "the partition sets no time limit")


def _nodes(out: _Out, nodes: Sequence[T.Node], first: T.Node, probed: Mapping[str, NodeFacts] | None) -> None:
    out.put(0, "nodes:")
    out.value(1, "nodes.nodelist", hostlist.fold(n.name for n in nodes), f"{len(nodes)} nodes")
    smi = _probe_gpus(probed)
    if first.gpus:
        out.put(1, f"gpus_per_node: {first.gpus}", f"Gres={','.join(g.raw for g in first.gres)}")
    elif smi:
        out.put(1, f"gpus_per_node: {smi[0]}", "nvidia-smi (Slurm has no gpu GRES here)")
    else:
        out.guess(1, "nodes.gpus_per_node", "gpus_per_node: 1", "Slurm has no gpu GRES on these nodes")
    # the probe's nvidia-smi name first; else the GRES type mapped to the token preflight finds in
    # that name (T.gpu_model_token's rule), unverified: GRES type names are the admin's choice
    token = next((t for t in map(T.gpu_model_token, first.gpu_types) if t), None)
    if smi:
        out.value(1, "nodes.gpu_model", smi[1], "nvidia-smi")
    elif token:
        out.guess(1, "nodes.gpu_model", f"gpu_model: {_q(token)}",
                  f"from GRES type {first.gpu_types[0]} (vendor words and sizes dropped)")
    elif first.gpu_types:
        out.todo(1, "nodes.gpu_model", "gpu_model: H100",
                 f"GRES type {first.gpu_types[0]} names no GPU model: run with --probe, or set it")
    else:
        out.todo(1, "nodes.gpu_model", "gpu_model: H100", "neither GRES nor nvidia-smi named the GPU type" if probed
                 else "GRES has no GPU type: run with --probe, or set it")
    if first.cpus:
        reserved = first.cpus_total is not None and first.cpus_total != first.cpus
        out.put(1, f"cpus_per_node: {first.cpus}",
                f"CPUEfctv: CPUTot={first.cpus_total} less the cores reserved for the system" if reserved
                else "CPUTot")
    if first.real_memory_mb and first.real_memory_mb > 1:
        jobs_mb = first.job_memory_mb or first.real_memory_mb
        out.put(1, f"mem_gb: {round(jobs_mb / 1024, 1):g}",
                f"RealMemory={first.real_memory_mb} MB less MemSpecLimit={first.mem_spec_mb} MB reserved for the system"
                if jobs_mb != first.real_memory_mb else f"RealMemory={first.real_memory_mb} MB")
    else:
        # RealMemory=1 is Slurm's value when slurm.conf sets none: not the node's memory
        out.todo(1, "nodes.mem_gb", "mem_gb: 256",
                 f"Slurm has no memory configured for these nodes (RealMemory={first.real_memory_mb})"
                 if first.real_memory_mb is not None else "Slurm reports no RealMemory for these nodes")
    if first.features:
        out.put(1, f"# features: {','.join(first.features)}", "Slurm features (for reference)")


def _probe_gpus(probed: Mapping[str, NodeFacts] | None) -> tuple[int, str] | None:
    for nf in (probed or {}).values():
        if nf.gpus is not None and nf.gpus.gpus:
            name = re.sub(r"^NVIDIA\s+", "", nf.gpus.gpus[0].name).split()[0]
            return len(nf.gpus.gpus), name
    return None


def _reachable(probed: Mapping[str, NodeFacts] | None) -> list[NodeFacts]:
    return [nf for nf in (probed or {}).values() if nf.reachable]


def _software(out: _Out, probed: Mapping[str, NodeFacts] | None) -> None:
    drivers = sorted({v for nf in _reachable(probed) for v in nf.drivers}, key=lambda v: P.version_tuple(v) or ())
    if drivers:
        out.put(0, "software:")
        out.value(1, "software.driver_min", drivers[0], "lowest driver found on the probed nodes")
    else:
        out.put(0, "# software:")  # a section of comments only would be null, which the schema refuses
        out.todo(1, "software.driver_min", 'driver_min: "535.104"', "nvidia-smi reported no driver on the probed nodes"
                 if probed else "run with --probe to read the drivers")
    out.todo(1, "software.container", 'container: {runtime: pyxis, image: "nvcr.io#nvidia/pytorch:24.05-py3"}',
             "container image: not known to Slurm")


def _network(out: _Out, probed: Mapping[str, NodeFacts] | None) -> None:
    out.put(0, "network:")
    invs = [nf.ib for nf in _reachable(probed) if nf.ib is not None and nf.ib.ports]
    if not invs:
        why = "no HCA found on the probed nodes" if probed else "fabric unknown without --probe"
        out.guess(1, "network.fabric", "fabric: ethernet", why)
        if not probed:
            out.todo(1, "network.hcas", "hcas: [mlx5_0, mlx5_1]", "run with --probe to list the HCAs")
        _ifname(out, probed, "ethernet")
        return
    layers = S.hca_layers(invs)
    known = set().union(*layers.values()) - {None}
    # InfiniBand rails win over an Ethernet NIC on the same driver (a RoCE bond beside them)
    fabric = "infiniband" if "InfiniBand" in known or not known else "roce"
    hcas, lower = S.fabric_tiers(invs, fabric)
    others = [h for h in layers if h not in hcas and h not in lower]
    out.put(1, f"fabric: {fabric}", f"link layer {', '.join(sorted(x or '?' for x in set().union(*layers.values())))}")
    if hcas:
        why = "HCAs present on every probed node" + (f", link layer {S.LINK_LAYERS[fabric]}" if known else "")
        out.value(1, "network.hcas", hcas, why)
    else:  # every HCA mixes link layers across ports or nodes: list them all, for the admin to pick
        hcas, others = list(layers), []
        out.guess(1, "network.hcas", f"hcas: {emit(hcas, quoted=False)}",
                  f"no HCA has only {S.LINK_LAYERS[fabric]} ports on every probed node")
    if others:
        named = ", ".join(f"{h} ({'/'.join(sorted(x or '?' for x in layers[h]))})" for h in others)
        out.put(1, f"# not the fabric's: {named}", "left out of hcas and NCCL_IB_HCA")
    if lower:
        # same link layer, slower and another device model: front-end NICs, by the rule of S.fabric_tiers
        named = ", ".join(f"{h} ({S.hca_model(invs, h) or 'model unknown'}, {_gbps(S.best_rate(invs, h))} Gb/s)"
                          for h in lower)
        out.put(1, f"# lower rate tier: {named}", "unverified: taken for front-end NICs, left out of hcas and "
                "NCCL_IB_HCA")
        out.unverified.append(f"network.hcas: {', '.join(lower)} left out as a lower rate tier (front-end NICs?)")
    tiers = [r for h in hcas if (r := S.best_rate(invs, h)) is not None]
    if tiers:
        top = max(tiers)
        slow = sorted({f"{p.hca} {_gbps(p.rate_gbps)}" for i in invs for h in hcas for p in i.ports_of(h)
                       if p.state == "ACTIVE" and p.rate_gbps and p.rate_gbps < top})
        out.put(1, f"port_rate_gbps: {int(top)}", "the rate of the fastest ACTIVE ports of these HCAs"
                + (f"; below it on a probed node: {', '.join(slow)}" if slow else ""))
    _ifname(out, probed, fabric)


def _topology(out: _Out, facts: ClusterFacts, nodes: Sequence[T.Node]) -> None:
    """``network.topology`` from ``TopologyPlugin`` and ``scontrol show topology``: the plugin, and
    the placement a job asks for left to the admin (the leaf groups' sizes say what fits)."""
    plugin = facts.topology_plugin
    if plugin is None:
        return
    names = {n.name for n in nodes}
    group_of = facts.topology.group_of() if facts.topology is not None else {}
    sizes: dict[str, int] = {}
    for host in names:
        if host in group_of:
            sizes[group_of[host]] = sizes.get(group_of[host], 0) + 1
    kind = "leaf switches" if plugin == "tree" else "blocks"
    seen = (f"{len(sizes)} {kind} over these nodes, {min(sizes.values())}-{max(sizes.values())} nodes each"
            if sizes else f"scontrol show topology places none of these nodes under its {kind}")
    out.put(1, "topology:", f"TopologyPlugin topology/{plugin}: {seen}")
    out.value(2, "network.topology.plugin", plugin, "TopologyPlugin")
    if plugin == "tree":
        out.todo(2, "network.topology.max_switches", 'max_switches: 1   # and max_wait: "00:10:00"',
                 "the most leaf switches a job may span (--switches=N@T): the site's choice")
    else:
        out.todo(2, "network.topology.segment", f"segment: {min(sizes.values()) if sizes else 1}",
                 "nodes per segment, each inside one block (--segment, Slurm 24.05+): the site's choice")


def _gbps(rate: float | None) -> str:
    return "?" if rate is None else f"{rate:g}"


def _ifname(out: _Out, probed: Mapping[str, NodeFacts] | None, fabric: str) -> None:
    want = "infiniband" if fabric == "infiniband" else "ethernet"
    names = [i.name for nf in _reachable(probed) for i in (nf.interfaces or ()) if i.kind == want and i.state == "up"]
    if names:
        kind = "IPoIB" if want == "infiniband" else "Ethernet"
        out.value(1, "network.socket_ifname", sorted(set(names))[0], f"an {kind} interface that is up")
    else:
        out.todo(1, "network.socket_ifname", "socket_ifname: ib0", "NCCL's bootstrap interface: not found by the probe"
                 if probed else "run with --probe to list the interfaces")


def _storage(out: _Out, probed: Mapping[str, NodeFacts] | None) -> None:
    reach = [nf for nf in _reachable(probed) if nf.mounts is not None]
    if not reach:
        out.todo(0, "storage", "storage: [{path: /lustre/scratch, type: lustre}]",
                 "shared file systems: run with --probe to list the mounts")
        return
    per_node = [{(m.mountpoint, _FSTYPES[m.fstype]) for m in nf.mounts or () if m.fstype in _FSTYPES} for nf in reach]
    shared = sorted(set.intersection(*per_node)) if per_node else []
    if not shared:
        out.todo(0, "storage", "storage: [{path: /lustre/scratch, type: lustre}]",
                 "no Lustre/NFS/GPFS/BeeGFS mount on every node")
        return
    out.put(0, "storage:", "mounted on every probed node")
    for path, kind in shared:
        out.put(1, f"- {{path: {_q(path)}, type: {kind}}}")
