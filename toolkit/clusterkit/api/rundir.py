"""The run directory a plan renders (:class:`RunDir`): what ``Plan.render`` returns and
``Job.run`` holds after a submit.

It sits below :mod:`.site` and :mod:`.job`, which both name it; the site it was planned for is
held as :class:`SiteOf` (what a run directory's reader asks of it), so that this module needs
nothing of :mod:`.site` and the API's modules import no one in a circle.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from clusterkit.config.schema import Site as SiteConfig
    from clusterkit.job.plan import Plan as StagePlan
    from clusterkit.rundir import RenderedRun


class SiteOf(Protocol):
    """The :class:`~clusterkit.api.site.Site` a run directory was planned for, as it is read here."""

    @property
    def config(self) -> SiteConfig: ...
    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class RunDir:
    """A rendered run directory: everything a job needs, exactly what the scheduler is given."""

    path: Path                      #: the run directory
    files: dict[str, str]           #: file name -> text, as written
    plan: StagePlan                 #: the stage plan it was rendered from (nodes, world size, sbatch, env)
    site: SiteOf                    #: the site it was planned for (a :class:`~clusterkit.api.site.Site`)

    @property
    def script(self) -> Path:
        """``job.sbatch``: what sbatch (or the local executor) runs."""
        return self.path / "job.sbatch"

    @property
    def sbatch(self) -> str:
        """The text of ``job.sbatch``."""
        return self.files["job.sbatch"]

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the plan warns about (the CLI prints these as ``clusterkit: warning:`` lines)."""
        return tuple(self.plan.warnings)

    @classmethod
    def _of(cls, run: RenderedRun, site: SiteOf) -> RunDir:
        return cls(run.run_dir, dict(run.artifacts), run.plan, site)
