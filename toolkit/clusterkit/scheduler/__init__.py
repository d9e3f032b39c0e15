"""Schedulers: Slurm and local behind one interface (:class:`~clusterkit.scheduler.base.Scheduler`).

Modules: ``base`` (the interface, JobStatus), the packages ``slurm`` and ``local`` (the two kinds,
independent of each other: submission, status, cancel, logs, the only modules that touch
submitit; and each kind's share of a plan, ``directives``: its ``#SBATCH`` lines and entry
template, which :func:`parts` hands to planning; Slurm's queries are its own too: ``slurm.tables``
(squeue/sacct/scontrol text, SlurmQuery), ``slurm.arrays`` (an array's tasks' status),
``slurm.queue`` (a pending job's place), ``slurm.sacct_runs`` (a job's allocations),
``slurm.steps`` (doctor's steps and down nodes), ``slurm.cluster`` (a submission's scontrol
questions), ``slurm.admin_text`` (scontrol's admin tables, parsed)),
``kind_traits`` (what a kind is able to answer or do, which :func:`traits` returns: what the code
outside this package asks instead of a kind's name), ``directives`` (the request both record),
``arrays`` (an array's record and its tasks' views), ``records`` (the job record store),
``status`` (refresh, wait, cache), ``logs``, and ``jobs`` (what the CLI calls: submit a run, look
at, follow and cancel a job).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clusterkit.job.scheduling import SchedulerParts
    from clusterkit.scheduler.base import Scheduler
    from clusterkit.scheduler.kind_traits import Traits
    from clusterkit.scheduler.slurm.tables import SlurmQuery


def get(kind: str, query: SlurmQuery | None = None) -> Scheduler:
    """The scheduler of ``kind`` (``slurm`` or ``local``); ``query`` is Slurm's seam for tests."""
    if kind == "slurm":
        from clusterkit.scheduler.slurm import SlurmScheduler

        return SlurmScheduler(query)
    if kind == "local":
        from clusterkit.scheduler.local import LocalScheduler

        return LocalScheduler()
    raise ValueError(f"unknown scheduler kind {kind!r}")


def parts(kind: str) -> SchedulerParts:
    """The share of a plan and of its job script the scheduler of ``kind`` owns (its directives,
    its entry template): what :func:`clusterkit.job.plan.make_plan` and rendering are given."""
    if kind == "slurm":
        from clusterkit.scheduler.slurm.directives import SlurmParts

        return SlurmParts()
    if kind == "local":
        from clusterkit.scheduler.local.directives import LocalParts

        return LocalParts()
    raise ValueError(f"unknown scheduler kind {kind!r}")


def traits(kind: str) -> Traits:
    """What the scheduler of ``kind`` is able to answer or do
    (:class:`~clusterkit.scheduler.kind_traits.Traits`): what every module outside this package asks
    instead of comparing a kind to a name."""
    if kind == "slurm":
        from clusterkit.scheduler.slurm.traits import TRAITS as slurm

        return slurm
    if kind == "local":
        from clusterkit.scheduler.local.traits import TRAITS as local

        return local
    raise ValueError(f"unknown scheduler kind {kind!r}")
