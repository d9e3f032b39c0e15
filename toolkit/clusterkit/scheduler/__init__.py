"""Schedulers: Slurm and local behind one interface (:class:`~clusterkit.scheduler.base.Scheduler`).

Modules: ``base`` (the interface, JobStatus), ``slurm`` and ``local`` (the two kinds; the only
ones that touch submitit), ``slurm_tables`` (squeue/sacct/scontrol text, SlurmQuery),
``records`` (the job record store), ``status`` (refresh, wait, cache), ``logs``, and ``jobs``
(what the CLI calls: submit a run, look at, follow and cancel a job).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clusterkit.scheduler.base import Scheduler
    from clusterkit.scheduler.slurm_tables import SlurmQuery


def get(kind: str, query: SlurmQuery | None = None) -> Scheduler:
    """The scheduler of ``kind`` (``slurm`` or ``local``); ``query`` is Slurm's seam for tests."""
    if kind == "slurm":
        from clusterkit.scheduler.slurm import SlurmScheduler

        return SlurmScheduler(query)
    if kind == "local":
        from clusterkit.scheduler.local import LocalScheduler

        return LocalScheduler()
    raise ValueError(f"unknown scheduler kind {kind!r}")
