"""Compare a site config with the live cluster, key by key (pure: facts in, findings out).

Each :class:`Drift` names the key, where the config sets it (file:line), the configured value,
the live value and the nodes.  Nodes that are down or drained are :class:`NodeState` entries,
not drift: the config is not wrong because a node is out for repair.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from clusterkit import hostlist
from clusterkit.nodes import device_parsers as D
from clusterkit.nodes import parsers as P
from clusterkit.nodes.facts import NodeFacts
from clusterkit.nodes.sections import fabric_hcas, hca_ports, mounted_as
from clusterkit.sites import slurm_text as T
from clusterkit.sites.facts import ClusterFacts
from clusterkit.slurmtext import parse_time

# Slurm's RealMemory is usually set a little below physical memory (the OS keeps some), and
# admins round mem_gb: within 5% is the same memory.
MEM_TOLERANCE = 0.05

Lines = Mapping[tuple[str | int, ...], tuple[str, int]]
V = TypeVar("V", bound=Hashable)


@dataclass(frozen=True)
class Drift:
    key: str
    file: str
    line: int | None
    configured: Any
    live: Any
    nodes: str  # folded hostlist; "" for cluster-wide facts
    message: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True)
class NodeState:
    nodes: str
    state: str
    reason: str


@dataclass
class DriftReport:
    """Everything one site's check found; ``live`` holds the facts ``--write`` may apply."""

    site: str
    file: str
    cluster: str | None
    drift: list[Drift] = field(default_factory=list)
    node_state: list[NodeState] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    live: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return 3 if self.unreachable else 1 if self.drift else 0

    def to_json(self) -> dict[str, Any]:
        return {"site": self.site, "file": self.file, "cluster": self.cluster,
                "drift": [asdict(d) for d in self.drift],
                "node_state": [asdict(s) for s in self.node_state],
                "unreachable": [{"node": h, "reason": r} for h, r in self.unreachable.items()],
                "notes": self.notes, "exit_code": self.exit_code}


class _Finder:
    """Builds Drift entries with the file:line of their key."""

    def __init__(self, site: Any, lines: Lines, report: DriftReport):
        self.site, self.lines, self.report = site, lines, report

    def add(self, path: tuple[str | int, ...], configured: Any, live: Any, hosts: Iterable[str], message: str) -> None:
        file, line = self._where(path)
        nodes = hostlist.fold(sorted(hosts))
        self.report.drift.append(Drift(_dotted(path), file, line, configured, live, nodes, message))

    def _where(self, path: tuple[str | int, ...]) -> tuple[str, int | None]:
        for n in range(len(path), 0, -1):
            hit = self.lines.get(path[:n])
            if hit:
                return hit[0], hit[1]
        return self.report.file, None


def _dotted(path: Sequence[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _group(values: Mapping[str, V]) -> dict[V, list[str]]:
    """The hosts that share each value."""
    out: dict[V, list[str]] = {}
    for host, value in values.items():
        out.setdefault(value, []).append(host)
    return out


# ---------------------------------------------------------------------------------------------
# Slurm facts
# ---------------------------------------------------------------------------------------------


def compare_slurm(site: Any, lines: Lines, facts: ClusterFacts, report: DriftReport) -> None:
    """Scheduler, node list and per-node CPUs/memory/GPUs against what Slurm reports."""
    f = _Finder(site, lines, report)
    sched = site.scheduler
    if sched.cluster and facts.cluster and sched.cluster != facts.cluster:
        f.add(("scheduler", "cluster"), sched.cluster, facts.cluster, (), "ClusterName differs")
    # without scheduler.partition, jobs go where sbatch sends them: Slurm's default partition
    part = facts.partitions.get(sched.partition) if sched.partition else facts.default_partition()
    if sched.partition and part is None:
        f.add(("scheduler", "partition"), sched.partition, facts.partitions.names, (),
              f"partition does not exist (partitions: {', '.join(facts.partitions.names) or 'none'})")
    if part is not None:
        _compare_time(f, sched.time, part)
    scope = facts.nodes_of(part)
    # folding thousands of names is the costly step at scale: once per check
    live_fold = hostlist.fold(n.name for n in scope)
    hosts = site.nodes.hosts
    _compare_membership(f, hosts, site.nodes.nodelist, facts, scope, live_fold, part)
    known = facts.nodes.by_name()
    mine = [known[h] for h in hosts if h in known]
    _compare_nodes(f, site, mine, report)
    report.node_state.extend(node_states(mine))
    report.live.update(live_slurm_facts(site, scope))
    if live_fold:
        report.live["nodelist"] = live_fold


def _compare_time(f: _Finder, time: str, part: T.Partition) -> None:
    want, limit = parse_time(time), part.max_time_s
    if want is not None and limit is not None and want > limit:
        f.add(("scheduler", "time"), time, part.max_time, (),
              f"longer than partition {part.name}'s MaxTime={part.max_time}: Slurm refuses such jobs")


def _compare_membership(f: _Finder, hosts: list[str], nodelist: str, facts: ClusterFacts, scope: list[T.Node],
                        live_fold: str, part: T.Partition | None) -> None:
    configured = set(hosts)
    known = {n.name for n in facts.nodes.nodes}
    live = {n.name for n in scope}
    unknown = sorted(configured - known)
    if unknown:
        f.add(("nodes", "nodelist"), nodelist, live_fold, unknown, "nodes Slurm does not know")
    outside = sorted((configured & known) - live)
    if outside:
        name = part.name if part else "?"
        f.add(("nodes", "nodelist"), nodelist, live_fold, outside, f"nodes not in partition {name}")
    extra = sorted(live - configured)
    if extra:
        where = f"partition {part.name}" if part else "the cluster"
        f.add(("nodes", "nodelist"), nodelist, live_fold, extra, f"nodes of {where} the config lacks")


def _compare_nodes(f: _Finder, site: Any, mine: list[T.Node], report: DriftReport) -> None:
    cfg = site.nodes
    no_gres = [n.name for n in mine if n.gpus is None]
    if no_gres:
        report.notes.append(f"Slurm schedules no GPUs (no gpu GRES) on {hostlist.fold(sorted(no_gres))}: "
                            "nodes.gpus_per_node not checked against Slurm there")
    _per_node(f, ("nodes", "gpus_per_node"), cfg.gpus_per_node,
              {n.name: n.gpus for n in mine if n.gpus is not None}, "GPUs per node (Slurm GRES)")
    _per_node(f, ("nodes", "cpus_per_node"), cfg.cpus_per_node,
              {n.name: n.cpus for n in mine if n.cpus is not None}, "CPUs per node (Slurm CPUEfctv, else CPUTot)")
    if cfg.gpu_model:
        want = cfg.gpu_model.lower()
        types = {n.name: ",".join(n.gpu_types) for n in mine if n.gpu_types}
        bad = {h: t for h, t in types.items() if not any(_type_matches(want, x) for x in t.split(","))}
        for live, hosts in _group(bad).items():
            f.add(("nodes", "gpu_model"), cfg.gpu_model, live, hosts, "GPU type (Slurm GRES)")
    unset = [n.name for n in mine if not n.real_memory_mb or n.real_memory_mb <= 1]
    if unset:
        report.notes.append(f"Slurm has no memory configured (RealMemory=1) on {hostlist.fold(sorted(unset))}: "
                            "nodes.mem_gb not checked against Slurm there")
    # the memory jobs get: RealMemory less MemSpecLimit, as sites init writes it
    mem = {n.name: n.job_memory_mb for n in mine if n.job_memory_mb and n.real_memory_mb and n.real_memory_mb > 1}
    off = {h: mb for h, mb in mem.items() if abs(mb / 1024 - cfg.mem_gb) > MEM_TOLERANCE * cfg.mem_gb}
    for mb, hosts in _group(off).items():
        f.add(("nodes", "mem_gb"), cfg.mem_gb, round(mb / 1024, 1), hosts,
              f"memory per node for jobs: Slurm RealMemory less MemSpecLimit = {mb} MB "
              f"(tolerance {MEM_TOLERANCE:.0%})")


def _per_node(f: _Finder, path: tuple[str, ...], configured: Any, live: Mapping[str, Any], what: str) -> None:
    for value, hosts in _group({h: v for h, v in live.items() if v != configured}).items():
        f.add(path, configured, value, hosts, what)


def node_states(nodes: Iterable[T.Node]) -> list[NodeState]:
    """Down, drained or otherwise unusable nodes, grouped by state and reason."""
    groups = _group({n.name: (n.state, n.reason) for n in nodes if not n.usable})
    return [NodeState(hostlist.fold(sorted(h)), s, r) for (s, r), h in groups.items()]


def live_slurm_facts(site: Any, scope: list[T.Node]) -> dict[str, Any]:
    """The values ``--write`` would set from Slurm: only those that are the same on every node."""
    out: dict[str, Any] = {}
    for key, values in (("gpus_per_node", {n.gpus for n in scope if n.gpus is not None}),
                        ("cpus_per_node", {n.cpus for n in scope if n.cpus is not None}),
                        ("gpu_model", {",".join(n.gpu_types) for n in scope if n.gpu_types})):
        if len(values) == 1:
            out[key] = values.pop()
    mems = {n.job_memory_mb for n in scope if n.job_memory_mb and n.real_memory_mb and n.real_memory_mb > 1}
    if len(mems) == 1:
        mb = mems.pop()
        if abs(mb / 1024 - site.nodes.mem_gb) > MEM_TOLERANCE * site.nodes.mem_gb:
            out["mem_gb"] = round(mb / 1024, 1)
    if "gpu_model" in out:
        want = (site.nodes.gpu_model or "").lower()
        types = out["gpu_model"].split(",")
        tokens = [T.gpu_model_token(t) for t in types]
        if want and any(_type_matches(want, t) for t in types):
            del out["gpu_model"]  # the configured name already matches (H100 vs h100)
        elif all(tokens):
            out["gpu_model"] = ",".join(t for t in tokens if t)  # the token preflight finds in nvidia-smi's name
        else:
            del out["gpu_model"]  # a GRES type that names no model is not a gpu_model to write
    return out


def _type_matches(want: str, gres_type: str) -> bool:
    """``want`` (a configured gpu_model, lower case) names the GPU that GRES type names."""
    t = gres_type.lower()
    token = (T.gpu_model_token(gres_type) or "").lower()
    return want in t or t in want or (bool(token) and (token in want or want in token))


# ---------------------------------------------------------------------------------------------
# node facts (--probe)
# ---------------------------------------------------------------------------------------------


def compare_probe(site: Any, lines: Lines, probed: Mapping[str, NodeFacts], report: DriftReport) -> None:
    """Driver, GPUs, HCAs, port rate and storage on every probed node."""
    f = _Finder(site, lines, report)
    ok = {h: nf for h, nf in probed.items() if nf.reachable}
    report.unreachable.update({h: nf.error for h, nf in probed.items() if not nf.reachable})
    for h, nf in ok.items():
        report.notes.extend(f"{h}: could not read {p}" for p in nf.problems)
    _probe_gpus(f, site, ok)
    if site.network.fabric != "ethernet":
        _probe_hcas(f, site, ok)
        _probe_rate(f, site, ok)
    _probe_storage(f, site, ok)
    invs = [nf.ib for nf in ok.values() if nf.ib is not None and nf.ib.hcas]
    if invs and site.network.fabric != "ethernet":
        common = fabric_hcas(invs, site.network.fabric)   # the rails, not a NIC of another link layer
        configured = [s.partition(":")[0] for s in site.network.hcas]
        if common and sorted(set(configured)) != common:
            report.live["hcas"] = common


def _probe_gpus(f: _Finder, site: Any, ok: Mapping[str, NodeFacts]) -> None:
    cfg, need = site.nodes, site.software.driver_min
    counts = {h: len(nf.gpus.gpus) for h, nf in ok.items() if nf.gpus is not None and nf.gpus.state is D.GpuState.OK}
    _per_node(f, ("nodes", "gpus_per_node"), cfg.gpus_per_node, counts, "GPUs per node (nvidia-smi)")
    if need:
        old = {h: min(nf.drivers, key=lambda v: P.version_tuple(v) or ()) for h, nf in ok.items()
               if nf.drivers and any(P.version_at_least(v, need) is False for v in nf.drivers)}
        for live, hosts in _group(old).items():
            f.add(("software", "driver_min"), need, live, hosts, f"driver {live} below driver_min {need}")
    if cfg.gpu_model:
        want = cfg.gpu_model.lower()
        bad = {h: ", ".join(nf.gpu_names) for h, nf in ok.items()
               if nf.gpu_names and any(want not in n.lower() for n in nf.gpu_names)}
        for live, hosts in _group(bad).items():
            f.add(("nodes", "gpu_model"), cfg.gpu_model, live, hosts, "GPU model (nvidia-smi)")


def _probe_hcas(f: _Finder, site: Any, ok: Mapping[str, NodeFacts]) -> None:
    missing: dict[str, str] = {}
    down: dict[str, str] = {}
    for h, nf in ok.items():
        if nf.ib is None:
            continue
        specs = list(site.network.hcas)
        gone = [s for s in specs if not hca_ports(nf.ib, s)]
        if gone:
            extra = sorted(set(fabric_hcas([nf.ib], site.network.fabric)) - {s.partition(":")[0] for s in specs})
            missing[h] = f"missing {', '.join(gone)}" + (f"; unlisted {', '.join(extra)} (renamed?)" if extra else "")
        bad = [f"{p.label} {p.state or '?'}" for s in specs for p in hca_ports(nf.ib, s) if p.state != "ACTIVE"]
        if bad:
            down[h] = ", ".join(bad)
    for live, hosts in _group(missing).items():
        f.add(("network", "hcas"), list(site.network.hcas), live, hosts, "HCAs missing or renamed")
    for live, hosts in _group(down).items():
        f.add(("network", "hcas"), list(site.network.hcas), live, hosts, "HCA ports not ACTIVE")


def _probe_rate(f: _Finder, site: Any, ok: Mapping[str, NodeFacts]) -> None:
    need = site.network.port_rate_gbps
    if not need:
        return
    slow: dict[str, str] = {}
    for h, nf in ok.items():
        if nf.ib is None:
            continue
        ports = [p for s in site.network.hcas for p in hca_ports(nf.ib, s)]
        low = [f"{p.label} {p.rate_gbps:g} Gb/s" for p in ports if p.rate_gbps is not None and p.rate_gbps < need]
        if low:
            slow[h] = ", ".join(low)
    for live, hosts in _group(slow).items():
        f.add(("network", "port_rate_gbps"), need, live, hosts, f"port rate below {need} Gb/s")


def _probe_storage(f: _Finder, site: Any, ok: Mapping[str, NodeFacts]) -> None:
    for i, s in enumerate(site.storage):
        bad: dict[str, str] = {}
        for h, nf in ok.items():
            if nf.mounts is None:
                continue
            m = P.find_mount(nf.mounts, s.path)
            if s.type == "local":
                continue
            if not mounted_as(m, s.type):
                bad[h] = f"{m.mountpoint} ({m.fstype})" if m and m.mountpoint != "/" else "not mounted"
        for live, hosts in _group(bad).items():
            f.add(("storage", i, "path"), f"{s.path} ({s.type})", live, hosts, f"{s.path} not mounted as {s.type}")


def check(site: Any, lines: Lines, facts: ClusterFacts, probed: Mapping[str, NodeFacts] | None = None) -> DriftReport:
    """The whole comparison for one site."""
    report = DriftReport(site.name, site.source, facts.cluster)
    compare_slurm(site, lines, facts, report)
    if probed is not None:
        compare_probe(site, lines, probed, report)
    return report

