"""What planning and rendering ask of a scheduler (:class:`SchedulerParts`), declared here so
that ``job/`` names no scheduler: each scheduler package (``clusterkit.scheduler.slurm``,
``clusterkit.scheduler.local``) implements it, and the layer above (``actions``) hands
:func:`clusterkit.job.plan.make_plan` the site's one.  Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from clusterkit.config.schema import Site
    from clusterkit.job.launchers import Launch
    from clusterkit.job.request import Resolved
    from clusterkit.vocab import SchedulerKind

#: One directive: (option, value or None for a flag), in sbatch's option names.
Directive = tuple[str, str | None]


class SchedulerParts(Protocol):
    """A scheduler's share of a plan and of its job script."""

    kind: SchedulerKind
    #: the job script's entry template (templates/job*.j2), which includes one template per concern
    entry: str
    #: the job runs on an allocation of nodes the scheduler grants, its launches in job steps (and so
    #: in the site's container), requeued by the scheduler; False: on this machine, in the batch shell
    allocates: bool

    def directives(self, site: Site, r: Resolved, nnodes: int, gpn: int, launch: Launch,
                   exclude: tuple[str, ...]) -> tuple[Directive, ...]:
        """The job's resource request in the scheduler's words (``plan.sbatch``, plan.json's
        ``sbatch``), in order: ``nnodes`` nodes (spares included) of ``gpn`` GPUs, less ``exclude``.
        Raises PlanError for a value the scheduler cannot take."""
        ...
