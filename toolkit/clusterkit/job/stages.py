"""The three deployment stages against a site: the node count, and whether the site can serve the stage.

The stages themselves (node ranges, defaults, needs) are :data:`clusterkit.vocab.STAGES`; the
stages in docs/jobs.md say what each is for.  A request outside a stage's node range, or on a
site that cannot serve the stage, is a :class:`~clusterkit.errors.PlanError` that says why; a
weak but legal setup is a warning carried on the plan.
"""

from __future__ import annotations

from clusterkit.config.schema import Site
from clusterkit.errors import PlanError
from clusterkit.vocab import STAGES, StageSpec, stage_for_nodes


def get(stage: str) -> StageSpec:
    try:
        return STAGES[stage]
    except KeyError:
        raise PlanError(f"unknown stage {stage!r}; valid stages: {', '.join(STAGES)}") from None


def node_count(spec: StageSpec, site: Site, requested: int | None) -> int:
    """The node count for this stage on this site, checked against the stage range and the site.
    ``requested``: the command line's, else the site's stage entry's (resolved once); None: the default."""
    n = requested if requested is not None else spec.default_nodes
    if n < spec.min_nodes or (spec.max_nodes is not None and n > spec.max_nodes):
        rng = f"{spec.min_nodes} or more" if spec.max_nodes is None else spec.node_range
        fits, unit = stage_for_nodes(n), "node" if rng == "1" else "nodes"
        raise PlanError(f"is outside stage {spec.name} ({rng} {unit}); stage {fits} holds {n} nodes",
                        field="nodes", value=str(n), sep=" ", fix=("stage", fits))
    available = len(site.nodes.hosts)
    if n > available:
        raise PlanError(f"but site {site.name} has only {available} nodes ({site.nodes.nodelist})",
                        field="nodes", value=str(n), sep=" ")
    return n


def check_site(spec: StageSpec, site: Site, allocates: bool) -> list[str]:
    """Raise PlanError if the site cannot serve the stage; return warnings for weak setups.
    ``allocates``: the site's scheduler grants nodes (:class:`clusterkit.job.scheduling.SchedulerParts`);
    one that does not (local) runs on this machine, one node."""
    warnings: list[str] = []
    if spec.name != "single-node" and not allocates:
        raise PlanError(f"site {site.name} is a local site (one machine): stage {spec.name} needs a Slurm site")
    if spec.needs_shared_storage and not site.shared_storage:
        raise PlanError(
            f"stage {spec.name} needs shared storage (nfs, lustre, gpfs or beegfs) for data and checkpoints, "
            f"and site {site.name} lists none under storage:")
    if spec.checks_fabric and site.network.fabric == "ethernet":
        warnings.append(
            f"site {site.name} has an Ethernet fabric: NCCL will use TCP sockets, expect slow all-reduce across nodes")
    if spec.wants_parallel_fs and not any(s.type in ("lustre", "gpfs", "beegfs") for s in site.shared_storage):
        warnings.append(
            f"site {site.name} has only NFS shared storage: at {spec.name} scale, checkpoint and data "
            "reads from every node can overload one NFS server; prefer Lustre or GPFS")
    return warnings


def requeues(spec: StageSpec, mode: str) -> bool:
    """Whether a Slurm job of this stage gets the time-limit warning and requeues itself: every
    stage does, but a one-node job whose launcher starts its workers itself on the batch host
    (``mode`` ``once``: horovod, colossalai, deepspeed's pdsh) has no job steps the warning could
    reach; there it is off unless asked for (then refused with the reason, as on several nodes)."""
    return spec.requeue and not (mode == "once" and spec.max_nodes == 1)
