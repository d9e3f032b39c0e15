"""A plan's ``#SBATCH`` directives (:func:`clusterkit.job.plan.make_plan`), and the shares of a node
they ask for: the CPUs per task and the memory of a job on some of a node's GPUs.  Pure."""

from __future__ import annotations

import re

from clusterkit.config.schema import OWNED_SBATCH, Site, owned_sbatch
from clusterkit.errors import PlanError
from clusterkit.job import array as arrays
from clusterkit.job import runtag, stages
from clusterkit.job import settings as settings_mod
from clusterkit.job.launchers import Launch
from clusterkit.job.request import JobRequest, Resolved
from clusterkit.job.settings import Settings
from clusterkit.vocab import slurm_seconds

_SBATCH_VALUE = re.compile(r"[^\s\x00-\x1f'\"\\`]+")
#: The longest per-job #SBATCH option (name and value) clusterkit writes.
_SBATCH_MAX = 4096
_MEM_OPTIONS = ("mem", "mem-per-cpu", "mem-per-gpu")


def cpu_share(site: Site, s: Settings, gpn: int, launch: Launch) -> tuple[int, int]:
    """(CPUs per task, OMP threads per rank): a job on some of a node's GPUs gets that share of
    its CPUs; each rank gets its share of its task's CPUs."""
    tasks = gpn if launch.mode == "per_gpu" else 1
    node_share = site.nodes.cpus_per_node * gpn // site.nodes.gpus_per_node
    cpus = s.cpus_per_task or max(1, node_share // tasks)
    ranks_per_task = 1 if launch.mode == "per_gpu" else gpn
    return cpus, max(1, cpus // ranks_per_task)


def _mem_share(site: Site, gpn: int, job_sbatch: tuple[tuple[str, str | None], ...] = ()
               ) -> list[tuple[str, str | None]]:
    """``--mem`` for a job on part of a node: its GPUs' share of the node's memory.

    ``--mem`` (per node) rather than ``--mem-per-gpu``/``--mem-per-cpu``: it is what Slurm users
    read in ``sinfo``/``scontrol show node``, holds whatever the task layout, and does not
    clash with a site's DefMemPerCPU.  A site that sets a memory option itself wins.
    """
    if gpn >= site.nodes.gpus_per_node or any(k in site.scheduler.sbatch for k in _MEM_OPTIONS):
        return []
    if any(k in _MEM_OPTIONS for k, _ in job_sbatch):
        return []
    return [("mem", f"{int(site.nodes.mem_gb * 1024 * gpn // site.nodes.gpus_per_node)}M")]


def _sbatch(site: Site, r: Resolved, nnodes: int, gpn: int, launch: Launch,
            exclude: tuple[str, ...]) -> tuple[tuple[str, str | None], ...]:
    sch = site.scheduler
    tasks = gpn if launch.mode == "per_gpu" else 1
    cpus, _ = cpu_share(site, r.settings, gpn, launch)
    out: list[tuple[str, str | None]] = []
    for key, value in (("partition", r.partition), ("account", r.account), ("qos", r.qos)):
        if value:
            out.append((key, value))
    out += [("time", r.time), ("nodes", str(nnodes)), ("ntasks-per-node", str(tasks)),
            ("gpus-per-node", settings_mod.gpus_per_node(r.settings, gpn)), ("cpus-per-task", str(cpus)),
            *_mem_share(site, gpn, r.job.sbatch)]
    if exclude:
        from clusterkit.hostlist import fold
        out.append(("exclude", fold(exclude)))
    if stages.requeues(r.spec, launch.mode):
        # B: signal only the batch shell; its trap forwards TERM to the launcher (torchrun
        # forwards only INT/TERM/HUP/QUIT, and NCCL itself grabs USR1).
        if r.max_restarts > 0 or slurm_seconds(r.time) > sch.preempt_signal_s + 60:   # room for the warning
            out.append(("signal", f"B:USR2@{sch.preempt_signal_s}"))
        out.append(("requeue", None) if r.max_restarts > 0 else ("no-requeue", None))
        out.append(("open-mode", "append"))   # a requeued run appends to the same log
        if nnodes > 1 and launch.mode != "once" and sch.kind == "slurm":
            # a node's death ends the launch step, not the allocation: the supervisor drops the
            # node, takes a spare and relaunches, or requeues without it (docs/architecture.md §3)
            out.append(("no-kill", None))
    out += _placement(site, nnodes)
    if r.request.run_name is not None and sch.kind == "slurm":
        # the run tag Slurm's accounting groups the run's jobs by (job/runtag.py); a job without a
        # run name is tagged once sbatch gave it its id (its run name holds the id)
        out.append(("comment", runtag.tag(r.request.run_name)))
    if r.request.dependency:
        # a dependency that can never be met (afterok on a job that failed) ends the job, not a forever-pending one
        out += [("dependency", r.request.dependency), ("kill-on-invalid-dep", "yes")]
    arr = array_plan(site, r.request)
    if arr is not None and site.scheduler.kind == "slurm":   # a local site runs the tasks in turn
        out.append(("array", arr.spec))
    own = dict(r.job.sbatch)   # the job's --sbatch options win over the site's of the same name
    for name, extra in sorted(sch.sbatch.items()):
        if name in own:
            continue
        if extra is True:
            out.append((name, None))
        elif extra is not False:
            out.append((name, str(extra)))
    for option, text in out:
        if text is not None and not _SBATCH_VALUE.fullmatch(text):
            # #SBATCH lines are comments to bash but a newline would start a live shell line,
            # and sbatch splits values at whitespace.
            raise PlanError(f"sbatch --{option} value {text!r}: whitespace, quotes and control characters "
                            "are not allowed")
    for option, text in r.job.sbatch:
        shown = repr(option if text is None else f"{option}={text}"[:80])
        owner = owned_sbatch(option)
        if owner is not None:
            raise PlanError(f"sets --{owner}, which clusterkit writes itself; use {OWNED_SBATCH[owner]}",
                            field="sbatch", value=shown)
        if text is not None and not _SBATCH_VALUE.fullmatch(text):
            raise PlanError("whitespace, quotes and control characters are not allowed in a value "
                            "(#SBATCH lines are read word by word)", field="sbatch", value=shown)
        if len(option) + len(text or "") > _SBATCH_MAX:
            raise PlanError(f"longer than {_SBATCH_MAX} characters: clusterkit writes no longer #SBATCH line",
                            field="sbatch", value=shown)
        out.append((option, text))
    return tuple(out)


def _placement(site: Site, nnodes: int) -> list[tuple[str, str | None]]:
    """``--switches=N[@T]`` (topology/tree) or ``--segment=S`` (topology/block) from the site's
    ``network.topology``, for a Slurm job of more than one node; a node count that is no multiple
    of the segment is refused (Slurm would refuse the job)."""
    topo = site.network.topology
    if topo is None or site.scheduler.kind != "slurm" or nnodes < 2:
        return []
    if topo.segment is not None and nnodes % topo.segment:
        raise PlanError(f"{nnodes} nodes are no multiple of network.topology.segment {topo.segment} (topology/block: "
                        "Slurm places a job in whole segments); choose a node count (spares included) that is")
    return list(topo.sbatch())


def array_plan(site: Site, request: JobRequest) -> arrays.ArrayPlan | None:
    """The request's job array on ``site`` (None: an ordinary job); see :mod:`clusterkit.job.array`."""
    if request.array is None:
        return None
    return arrays.plan(request.array, slurm=site.scheduler.kind == "slurm", site=site.name,
                       max_array_size=site.scheduler.max_array_size)
