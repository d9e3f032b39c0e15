"""Slurm's share of a plan: the ``#SBATCH`` lines only Slurm has (``--no-kill``, the placement
``--switches``/``--segment``, the run's ``--comment`` tag, ``--array``) added to the request every
scheduler records (:mod:`clusterkit.scheduler.directives`), and the job script's entry template.
Pure: planning calls it through :class:`clusterkit.job.scheduling.SchedulerParts`."""

from __future__ import annotations

from clusterkit.config.schema import Site
from clusterkit.errors import PlanError
from clusterkit.job import runtag
from clusterkit.job.launchers import Launch
from clusterkit.job.request import Resolved
from clusterkit.job.scheduling import Directive
from clusterkit.job.shares import array_plan
from clusterkit.scheduler import directives
from clusterkit.scheduler.slurm.traits import TRAITS
from clusterkit.vocab import SchedulerKind

#: The Slurm job script's entry template (templates/job.sbatch.j2).
ENTRY = "job.sbatch.j2"


class SlurmExtras(directives.Extras):
    def requeued(self, site: Site, r: Resolved, nnodes: int, launch: Launch) -> list[Directive]:
        if nnodes > 1 and launch.mode != "once":
            # a node's death ends the launch step, not the allocation: the supervisor drops the
            # node, takes a spare and relaunches, or requeues without it (docs/architecture.md §3)
            return [("no-kill", None)]
        return []

    def placed(self, site: Site, r: Resolved, nnodes: int) -> list[Directive]:
        out = placement(site, nnodes)
        if r.request.run_name is not None:
            # the run tag Slurm's accounting groups the run's jobs by (job/runtag.py); a job without a
            # run name is tagged once sbatch gave it its id (its run name holds the id)
            out.append(("comment", runtag.tag(r.request.run_name)))
        return out

    def arrayed(self, site: Site, r: Resolved) -> list[Directive]:
        arr = array_plan(site, r.request, allocates=TRAITS.allocates)
        return [] if arr is None else [("array", arr.spec)]


def placement(site: Site, nnodes: int) -> list[Directive]:
    """``--switches=N[@T]`` (topology/tree) or ``--segment=S`` (topology/block) from the site's
    ``network.topology``, for a job of more than one node; a node count that is no multiple
    of the segment is refused (Slurm would refuse the job)."""
    topo = site.network.topology
    if topo is None or nnodes < 2:
        return []
    if topo.segment is not None and nnodes % topo.segment:
        raise PlanError(f"{nnodes} nodes are no multiple of network.topology.segment {topo.segment} (topology/block: "
                        "Slurm places a job in whole segments); choose a node count (spares included) that is")
    return list(topo.sbatch())


class SlurmParts:
    """Slurm's :class:`~clusterkit.job.scheduling.SchedulerParts`."""

    kind: SchedulerKind = TRAITS.kind
    entry = ENTRY
    allocates = TRAITS.allocates

    def directives(self, site: Site, r: Resolved, nnodes: int, gpn: int, launch: Launch,
                   exclude: tuple[str, ...]) -> tuple[Directive, ...]:
        return directives.request(site, r, nnodes, gpn, launch, exclude, SlurmExtras())
