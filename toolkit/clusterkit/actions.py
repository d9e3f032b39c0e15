"""The render path every command shares: site -> plan -> artifacts -> run directory.

``render`` and ``submit`` (and ``plan --render``) call :func:`render_run`; nothing else builds a
run directory, so ``submit --dry-run`` shows exactly what ``submit`` hands to sbatch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from clusterkit.job import render as render_mod
from clusterkit.job import rundir as workspace
from clusterkit.errors import ExitCode, PlanError, PreflightError
from clusterkit.job.plan import JobRequest, Plan, make_plan
from clusterkit.config.site import Site, load_site


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
    request = read_inputs(draft, request)
    run_dir = workspace.resolve_out(out, draft.job_name)
    try:
        plan = make_plan(site_obj, replace(request, run_dir=str(run_dir)))
        artifacts = render_mod.render(site_obj, plan)
        workspace.write_run_dir(run_dir, artifacts)
    except BaseException:
        if out is None:  # resolve_out created the default directory
            workspace.release(run_dir)
        raise
    return RenderedRun(site_obj, plan, artifacts, run_dir)


_MAX_INPUT_BYTES = 1 << 20


def read_inputs(draft: Plan, request: JobRequest) -> JobRequest:
    """Read, on the submit host, the files the command names that the plan checks: the user's
    own DeepSpeed config, whose batch sizes must match the world before the job is queued."""
    if draft.launcher != "deepspeed":
        return request
    from clusterkit.job.launchers.deepspeed import user_config

    user = user_config(request.command)
    if user is None:
        return request
    path = Path(user.path)
    try:
        with path.open("rb") as fh:
            data = fh.read(_MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise PlanError(f"deepspeed: {user.flag} {user.path}: cannot read the DeepSpeed config "
                        f"({exc.strerror or exc})") from None
    if len(data) > _MAX_INPUT_BYTES:
        raise PlanError(f"deepspeed: {user.flag} {user.path}: larger than 1 MiB; not a DeepSpeed config")
    text = data.decode("utf-8", errors="replace")
    return replace(request, inputs={user.path: (str(path.resolve()), text)})


@dataclass(frozen=True)
class Gate:
    """What preflight decided before a submission (or why it did not run)."""

    request: JobRequest            # the request to submit: bad nodes added to its exclude list
    report: Any = None             # preflight Report, when it ran
    decision: Any = None           # PolicyDecision, when it ran
    skipped: str | None = None     # why preflight did not run

    @property
    def excluded(self) -> list[str]:
        return list(self.decision.exclude) if self.decision is not None else []


def preflight_gate(site: Site, request: JobRequest, *, skip: bool = False, accept_new_host_keys: bool = False,
                   on_result: Callable[[Any], None] | None = None) -> Gate:
    """Check the site's candidate nodes before a submission; apply the site's policy.

    Candidates are the site's nodes minus those already excluded.  Under policy ``exclude``
    the failed and unreachable nodes join the request's exclude list (so ``#SBATCH --exclude``
    and plan.json show them); under ``refuse``, or when too few good nodes remain, the gate
    raises :class:`~clusterkit.errors.PreflightError` carrying the report.
    """
    if skip:
        return Gate(request, skipped="--skip-preflight")
    if site.scheduler.kind == "local":
        return Gate(request, skipped="local site: nothing remote to check (clusterkit preflight --transport local checks this machine)")
    if not site.preflight.before_submit:
        return Gate(request, skipped=f"site {site.name} sets preflight.before_submit: false")
    from clusterkit import hostlist
    from clusterkit.preflight.run import decide_for_site, run_preflight

    draft = make_plan(site, request)
    candidates = [h for h in site.nodes.hosts if h not in set(request.exclude)]
    report = run_preflight(site, stage=draft.stage, nodes=hostlist.fold(candidates), transport=site.preflight.transport,
                           accept_new_host_keys=accept_new_host_keys, on_result=on_result)
    decision = decide_for_site(report, site, nodes_needed=draft.nnodes)
    if decision.refuse:
        raise PreflightRefused(decision.reason, report)
    exclude = tuple(sorted(set(request.exclude) | set(decision.exclude)))
    return Gate(replace(request, exclude=exclude), report, decision)


class PreflightRefused(PreflightError):
    """Preflight's verdict under the site policy: do not submit.  Carries the report to show."""

    def __init__(self, reason: str, report: Any):
        super().__init__(f"preflight: not submitting: {reason}")
        self.report = report
        if report.unreachable_nodes():
            self.exit_code = ExitCode.UNREACHABLE
