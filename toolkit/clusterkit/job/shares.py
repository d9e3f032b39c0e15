"""The shares of a node a job asks for (CPUs per task, OMP threads per rank) and its job array:
what :func:`clusterkit.job.plan.make_plan` derives from the site itself.  Pure.  The scheduler's
own words for the request (``#SBATCH`` lines) are the scheduler's
(:meth:`clusterkit.job.scheduling.SchedulerParts.directives`)."""

from __future__ import annotations

from clusterkit.config.schema import Site
from clusterkit.job import array as arrays
from clusterkit.job.launchers import Launch
from clusterkit.job.request import JobRequest
from clusterkit.job.settings import Settings


def cpu_share(site: Site, s: Settings, gpn: int, launch: Launch) -> tuple[int, int]:
    """(CPUs per task, OMP threads per rank): a job on some of a node's GPUs gets that share of
    its CPUs; each rank gets its share of its task's CPUs."""
    tasks = gpn if launch.mode == "per_gpu" else 1
    node_share = site.nodes.cpus_per_node * gpn // site.nodes.gpus_per_node
    cpus = s.cpus_per_task or max(1, node_share // tasks)
    ranks_per_task = 1 if launch.mode == "per_gpu" else gpn
    return cpus, max(1, cpus // ranks_per_task)


def array_plan(site: Site, request: JobRequest, allocates: bool) -> arrays.ArrayPlan | None:
    """The request's job array on ``site`` (None: an ordinary job); see :mod:`clusterkit.job.array`.
    ``allocates``: the site's scheduler runs the tasks (Slurm's array), else they run in turn."""
    if request.array is None:
        return None
    return arrays.plan(request.array, slurm=allocates, site=site.name,
                       max_array_size=site.scheduler.max_array_size)
