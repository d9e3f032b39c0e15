"""A job's resource request in sbatch's option names, which every scheduler records in its plan
(``plan.sbatch``, plan.json's ``sbatch``): nodes, tasks, GPUs, the CPUs per task and the memory of a
job on some of a node's GPUs, the requeue options, the dependency, the site's and the job's own
options, each value checked.  What only one scheduler adds comes through its :class:`Extras`
(Slurm's: :mod:`clusterkit.scheduler.slurm.directives`); a local site adds nothing.  Pure."""

from __future__ import annotations

import re

from clusterkit.config.schema import OWNED_SBATCH, Site, owned_sbatch
from clusterkit.errors import PlanError
from clusterkit.job import settings as settings_mod
from clusterkit.job import stages
from clusterkit.job.launchers import Launch
from clusterkit.job.request import Resolved
from clusterkit.job.scheduling import Directive
from clusterkit.job.shares import cpu_share
from clusterkit.vocab import slurm_seconds

_SBATCH_VALUE = re.compile(r"[^\s\x00-\x1f'\"\\`]+")
#: The longest per-job #SBATCH option (name and value) clusterkit writes.
_SBATCH_MAX = 4096
_MEM_OPTIONS = ("mem", "mem-per-cpu", "mem-per-gpu")


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


class Extras:
    """What one scheduler adds to the common request, at its place in the order; this one adds
    nothing (a local site: one machine, no allocation, no accounting)."""

    def requeued(self, site: Site, r: Resolved, nnodes: int, launch: Launch) -> list[Directive]:
        """After the requeue options, for a job that requeues."""
        return []

    def placed(self, site: Site, r: Resolved, nnodes: int) -> list[Directive]:
        """After the exclude list and the requeue options: where the nodes are, the run's tag."""
        return []

    def arrayed(self, site: Site, r: Resolved) -> list[Directive]:
        """After the dependency: the job array."""
        return []


def request(site: Site, r: Resolved, nnodes: int, gpn: int, launch: Launch, exclude: tuple[str, ...],
            extras: Extras | None = None) -> tuple[Directive, ...]:
    """The request of ``nnodes`` nodes (spares included) of ``gpn`` GPUs less ``exclude``, with
    ``extras``' own, the site's ``scheduler.sbatch`` and the job's ``--sbatch`` options last."""
    extras = extras or Extras()
    sch = site.scheduler
    tasks = gpn if launch.mode == "per_gpu" else 1
    cpus, _ = cpu_share(site, r.settings, gpn, launch)
    out: list[Directive] = []
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
        out += extras.requeued(site, r, nnodes, launch)
    out += extras.placed(site, r, nnodes)
    if r.request.dependency:
        # a dependency that can never be met (afterok on a job that failed) ends the job, not a forever-pending one
        out += [("dependency", r.request.dependency), ("kill-on-invalid-dep", "yes")]
    out += extras.arrayed(site, r)
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
