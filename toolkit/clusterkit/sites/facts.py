"""Facts about a live Slurm cluster, gathered through one seam: a function that runs a Slurm
client command and returns its stdout (:func:`clusterkit.slurmclient.require` on a real cluster).

Three calls, one per kind, whatever the cluster's size: ``scontrol show config``,
``scontrol show partition -o``, ``scontrol show node -o``; a fourth, ``scontrol show topology``,
where the config names topology/tree or topology/block.  A controller that does not answer
is a :class:`SlurmUnreachable` (exit 3), never a guess.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from clusterkit import hostlist, topology
from clusterkit.errors import InputError, SlurmTextError
from clusterkit.scheduler.slurm import cluster
from clusterkit.sites import slurm_text as T
from clusterkit.slurmclient import require

SlurmCommand = Callable[[Sequence[str]], str]

COMMANDS = cluster.COMMANDS   # the Slurm scheduler's (clusterkit.scheduler.slurm.cluster)


@dataclass(frozen=True)
class ClusterFacts:
    """What Slurm says about the cluster: its config, partitions and nodes."""

    config: T.SlurmConfig
    partitions: T.Partitions
    nodes: T.Nodes
    topology: topology.Topology | None = None   # asked only where TopologyPlugin is tree or block

    @property
    def topology_plugin(self) -> str | None:
        """``tree`` or ``block`` where ``TopologyPlugin`` names topology/tree or topology/block."""
        plugin = self.config.values.get("TopologyPlugin", "")
        return {"topology/tree": "tree", "topology/block": "block"}.get(plugin)

    @property
    def cluster(self) -> str | None:
        return self.config.cluster_name

    def partition(self, name: str) -> T.Partition:
        """The named partition, or a InputError listing the ones that exist."""
        part = self.partitions.get(name)
        if part is None:
            raise InputError(f"partition {name!r} does not exist on cluster {self.cluster or '?'}; "
                             f"partitions: {', '.join(self.partitions.names) or 'none'}")
        return part

    def default_partition(self) -> T.Partition | None:
        return next((p for p in self.partitions.partitions if p.default), None)

    def nodes_of(self, partition: T.Partition | None) -> list[T.Node]:
        """The nodes of a partition (all nodes for None), in Slurm's order."""
        if partition is None:
            return list(self.nodes.nodes)
        try:
            members = set(hostlist.expand(partition.nodes)) if partition.nodes else set()
        except hostlist.HostlistError as exc:
            raise SlurmTextError(f"Slurm lists the nodes of partition {partition.name!r} as something that is "
                                 f"not a plain host list: {exc}") from None
        return [n for n in self.nodes.nodes if n.name in members]


def gather(run: SlurmCommand = require) -> ClusterFacts:
    """Ask Slurm once per kind.  The config comes first: an unreachable controller fails fast."""
    config = T.parse_config(run(COMMANDS["config"]))
    partitions = T.parse_partitions(run(COMMANDS["partitions"]))
    nodes = T.parse_nodes(run(COMMANDS["nodes"]))
    facts = ClusterFacts(config, partitions, nodes)
    if facts.topology_plugin is None:
        return facts
    return ClusterFacts(config, partitions, nodes, topology.parse(run(COMMANDS["topology"])))


@dataclass(frozen=True)
class NodeType:
    """Nodes that look the same to Slurm: same CPUs, memory, GPUs, GPU type and features."""

    cpus: int | None
    real_memory_mb: int | None
    gpus: int | None
    gpu_type: str | None
    features: tuple[str, ...]

    def describe(self) -> str:
        gpus = f"{self.gpus} x {self.gpu_type or 'gpu'}" if self.gpus else "no GPUs"
        feats = f", features {','.join(self.features)}" if self.features else ""
        return f"{self.cpus} CPUs, {self.real_memory_mb} MB, {gpus}{feats}"


def node_type(node: T.Node) -> NodeType:
    types = node.gpu_types
    return NodeType(node.cpus, node.real_memory_mb, node.gpus, ",".join(types) or None, tuple(sorted(node.features)))


def group_types(nodes: Sequence[T.Node]) -> dict[NodeType, list[str]]:
    """Node names per node type, in first-seen order."""
    out: dict[NodeType, list[str]] = {}
    for n in nodes:
        out.setdefault(node_type(n), []).append(n.name)
    return out
