"""The three deployment stages: how many nodes each covers, what it needs, what it defaults to.

The README's stage table says what each is for.  A request outside a stage's node range, or on a
site that cannot serve the stage, is a :class:`~clusterkit.errors.PlanError` that says why; a
weak but legal setup is a warning carried on the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from clusterkit.errors import PlanError
from clusterkit.config.site import STAGE_NAMES, Site


@dataclass(frozen=True)
class StageSpec:
    name: str
    min_nodes: int
    max_nodes: int | None
    default_nodes: int
    default_launcher: str
    needs_shared_storage: bool
    checks_fabric: bool          # IB/RoCE checks and NCCL fabric policy apply
    wants_parallel_fs: bool      # warn on NFS: metadata storms at scale
    requeue: bool                # preemption trap + requeue budget
    help: str


STAGES: dict[str, StageSpec] = {
    "single-node": StageSpec(
        "single-node", 1, 1, 1, "torchrun", False, False, False, False,
        "one machine, many GPUs; torchrun on the job's own port; no IB or shared storage needed"),
    "multi-node": StageSpec(
        "multi-node", 2, 8, 2, "torchrun", True, True, False, True,
        "2-8 nodes; shared NFS/Lustre; RDMA fabric (warned on Ethernet); torchrun c10d rendezvous"),
    "large-cluster": StageSpec(
        "large-cluster", 9, None, 16, "deepspeed", True, True, True, True,
        "9+ nodes; Lustre/GPFS (warned on NFS); containers; deepspeed + hostfile; requeue on preemption"),
}
assert tuple(STAGES) == STAGE_NAMES


def get(stage: str) -> StageSpec:
    try:
        return STAGES[stage]
    except KeyError:
        raise PlanError(f"unknown stage {stage!r}; valid stages: {', '.join(STAGES)}") from None


def node_count(spec: StageSpec, site: Site, requested: int | None) -> int:
    """The node count for this stage on this site, checked against the stage range and the site."""
    override = site.stages.get(spec.name)  # type: ignore[call-overload]
    n = requested if requested is not None else (override.nodes if override and override.nodes else spec.default_nodes)
    if n < spec.min_nodes or (spec.max_nodes is not None and n > spec.max_nodes):
        rng = f"{spec.min_nodes}" if spec.min_nodes == spec.max_nodes else (
            f"{spec.min_nodes}-{spec.max_nodes}" if spec.max_nodes else f"{spec.min_nodes} or more")
        raise PlanError(f"--nodes {n} is outside stage {spec.name} ({rng} nodes); pick the stage that fits {n} nodes")
    available = len(site.nodes.hosts)
    if n > available:
        raise PlanError(f"--nodes {n} but site {site.name} has only {available} nodes ({site.nodes.nodelist})")
    return n


def check_site(spec: StageSpec, site: Site) -> list[str]:
    """Raise PlanError if the site cannot serve the stage; return warnings for weak setups."""
    warnings: list[str] = []
    if spec.name != "single-node" and site.scheduler.kind == "local":
        raise PlanError(f"site {site.name} is a local site (one machine): stage {spec.name} needs a Slurm site")
    if spec.needs_shared_storage and not site.shared_storage:
        raise PlanError(
            f"stage {spec.name} needs shared storage (nfs, lustre or gpfs) for data and checkpoints, "
            f"and site {site.name} lists none under storage:")
    if spec.checks_fabric and site.network.fabric == "ethernet":
        warnings.append(
            f"site {site.name} has an Ethernet fabric: NCCL will use TCP sockets, expect slow all-reduce across nodes")
    if spec.wants_parallel_fs and not any(s.type in ("lustre", "gpfs") for s in site.shared_storage):
        warnings.append(
            f"site {site.name} has only NFS shared storage: at {spec.name} scale, checkpoint and data "
            "reads from every node can overload one NFS server; prefer Lustre or GPFS")
    return warnings
