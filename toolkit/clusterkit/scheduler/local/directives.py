"""The local scheduler's share of a plan: the request every scheduler records
(:mod:`clusterkit.scheduler.directives`, nothing added: one machine, no allocation, no
accounting; its tasks of a job array run in turn) and the job script's entry template.  Pure:
planning calls it through :class:`clusterkit.job.scheduling.SchedulerParts`."""

from __future__ import annotations

from clusterkit.config.schema import Site
from clusterkit.job.launchers import Launch
from clusterkit.job.request import Resolved
from clusterkit.job.scheduling import Directive
from clusterkit.scheduler import directives
from clusterkit.scheduler.local.traits import TRAITS
from clusterkit.vocab import SchedulerKind

#: The local job script's entry template (templates/job.local.j2).
ENTRY = "job.local.j2"


class LocalParts:
    """The local scheduler's :class:`~clusterkit.job.scheduling.SchedulerParts`."""

    kind: SchedulerKind = TRAITS.kind
    entry = ENTRY
    allocates = TRAITS.allocates

    def directives(self, site: Site, r: Resolved, nnodes: int, gpn: int, launch: Launch,
                   exclude: tuple[str, ...]) -> tuple[Directive, ...]:
        return directives.request(site, r, nnodes, gpn, launch, exclude)
