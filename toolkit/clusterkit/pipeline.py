"""The render path every command shares: site -> plan -> artifacts -> run directory.

``render`` and ``submit`` (and ``plan --render``) call :func:`render_run`; nothing else builds a
run directory, so ``submit --dry-run`` shows exactly what ``submit`` hands to sbatch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from clusterkit import render as render_mod
from clusterkit import workspace
from clusterkit.plan import JobRequest, Plan, make_plan
from clusterkit.site import Site, load_site


@dataclass(frozen=True)
class RenderedRun:
    site: Site
    plan: Plan
    artifacts: dict[str, str]
    run_dir: Path

    @property
    def script(self) -> Path:
        return self.run_dir / "job.sbatch"


def render_run(site: Site | str, request: JobRequest, out: str | None = None) -> RenderedRun:
    """Plan and render ``request`` on ``site`` and write the run directory atomically.

    Everything is checked (site, stage, launcher, batch math, output directory) before the
    first byte is written.
    """
    site_obj = load_site(site) if isinstance(site, str) else site
    draft = make_plan(site_obj, request)                   # validates; names the job
    run_dir = workspace.resolve_out(out, draft.job_name)
    plan = make_plan(site_obj, replace(request, run_dir=str(run_dir)))
    artifacts = render_mod.render(site_obj, plan)
    workspace.write_run_dir(run_dir, artifacts)
    return RenderedRun(site_obj, plan, artifacts, run_dir)
