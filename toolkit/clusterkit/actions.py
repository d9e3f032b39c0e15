"""The flows the commands share: resolve the request once, claim its run directory, plan once,
gate, write.

``render``, ``submit`` and ``plan --render`` call :func:`render_run`; nothing else builds a run
directory, so ``submit --dry-run`` shows exactly what ``submit`` hands to sbatch.  ``submit``
passes :func:`preflight_gate` in as the gate: it checks the plan's candidate nodes and returns
the plan with the bad ones excluded (:meth:`~clusterkit.job.plan.Plan.excluding`), so the job
is planned once whatever preflight finds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterkit import rundir
from clusterkit.config.load import load_site
from clusterkit.config.schema import Site
from clusterkit.errors import ExitCode, PlanError, PreflightError
from clusterkit.job import launchers
from clusterkit.job import plan as planning
from clusterkit.job import render as render_mod
from clusterkit.job import settings as settings_mod
from clusterkit.job.plan import Plan
from clusterkit.job.request import JobRequest, resolve
from clusterkit.rundir import RenderedRun

if TYPE_CHECKING:
    from clusterkit.preflight.report import NodeResult, PolicyDecision, Report
    from clusterkit.scheduler.jobs import Submission
    from clusterkit.scheduler.records import RecordStore
    from clusterkit.sizing import Sizing


def render_run(site: Site | str, request: JobRequest, out: str | None = None, *,
               gate: Callable[[Plan], Plan] | None = None) -> RenderedRun:
    """Plan ``request`` on ``site`` once and write the run directory atomically.

    The request is resolved against the site once (job name, launcher, every setting); the run
    directory comes next (the plan records it), then the plan, then ``gate`` (submit's
    preflight), which may refuse or return the plan with nodes excluded; only then is anything
    rendered and written.  Without ``out`` the run directory goes under ``./runs``, or, on a
    Slurm site when the current directory is not on its shared storage, under the first shared
    folder of the user's there (:func:`clusterkit.rundir.default_base`).  On any failure the
    default run directory (created here, where ``--out`` is only checked), and ``./runs`` if it
    was made for it, is removed again.
    """
    site_obj = load_site(site) if isinstance(site, str) else site
    resolved = resolve(site_obj, request)
    inputs = read_inputs(resolved.launcher, request).inputs
    claim = rundir.resolve_out(out, resolved.job_name, base=None if out else rundir.default_base(site_obj))
    run_dir = claim.path
    try:
        plan = planning.make_plan(site_obj, resolved.with_request(run_dir=str(run_dir), inputs=inputs))
        if gate is not None:
            plan = gate(plan)
        artifacts = render_mod.render(site_obj, plan)
        rundir.write_run_dir(run_dir, artifacts)
    except BaseException:
        claim.release()  # the default directory (and ./runs) when resolve_out created them
        raise
    return RenderedRun(site_obj, plan, artifacts, run_dir)


_MAX_INPUT_BYTES = 1 << 20


def read_inputs(launcher: str, request: JobRequest) -> JobRequest:
    """Read, on the submit host, the files of the command the launcher checks at render time
    (a user's own DeepSpeed config, whose batch sizes must match the world before the job is queued)."""
    read: dict[str, tuple[str, str]] = {}
    for wanted in launchers.inputs(launcher, request.command):
        path = Path(wanted.path)
        try:
            with path.open("rb") as fh:
                data = fh.read(_MAX_INPUT_BYTES + 1)
        except OSError as exc:
            raise PlanError(f"{wanted.what}: cannot read the {wanted.kind} ({exc.strerror or exc})") from None
        if len(data) > _MAX_INPUT_BYTES:
            raise PlanError(f"{wanted.what}: larger than 1 MiB; not a {wanted.kind}")
        read[wanted.path] = (str(path.resolve()), data.decode("utf-8", errors="replace"))
    return replace(request, inputs=read) if read else request


@dataclass(frozen=True)
class Gate:
    """What preflight decided before a submission (or why it did not run)."""

    plan: Plan                                 # the plan to submit: bad nodes added to its exclude list
    report: Report | None = None               # when preflight ran
    decision: PolicyDecision | None = None     # when preflight ran
    skipped: str | None = None                 # why preflight did not run

    @property
    def excluded(self) -> list[str]:
        return list(self.decision.exclude) if self.decision is not None else []


def preflight_gate(site: Site, plan: Plan, *, skip: bool = False, accept_new_host_keys: bool = False,
                   on_result: Callable[[NodeResult], None] | None = None) -> Gate:
    """Check the site's candidate nodes for ``plan`` before a submission; apply the site's policy.

    Candidates are the site's nodes minus those the plan already excludes.  Under policy
    ``exclude`` the failed and unreachable nodes join the plan's exclude list (so ``#SBATCH
    --exclude`` and plan.json show them); under ``refuse``, or when too few good nodes remain,
    the gate raises :class:`PreflightRefused` carrying the report.
    """
    if skip:
        return Gate(plan, skipped="--skip-preflight")
    if site.scheduler.kind == "local":
        return Gate(plan, skipped="local site: nothing remote to check "
                                  "(clusterkit preflight --transport local checks this machine)")
    if not site.preflight.before_submit:
        return Gate(plan, skipped=f"site {site.name} sets preflight.before_submit: false")
    from clusterkit import hostlist
    from clusterkit.preflight.run import decide_for_site, run_preflight

    report = run_preflight(site, stage=plan.stage, nodes=hostlist.fold(plan.candidates),
                           transport=site.preflight.transport, accept_new_host_keys=accept_new_host_keys,
                           on_result=on_result)
    decision = decide_for_site(report, site, nodes_needed=plan.nnodes)
    if decision.refuse:
        raise PreflightRefused(decision.reason, report)
    return Gate(plan.excluding(decision.exclude), report, decision)


class PreflightRefused(PreflightError):
    """Preflight's verdict under the site policy: do not submit.  Carries the report to show."""

    def __init__(self, reason: str, report: Report):
        super().__init__(f"preflight: not submitting: {reason}")
        self.report = report
        if report.unreachable_nodes():
            self.exit_code = ExitCode.UNREACHABLE


def submit(site: Site, request: JobRequest, out: str | None, store: RecordStore, *, skip_preflight: bool = False,
           on_gate: Callable[[Gate], None] | None = None) -> tuple[RenderedRun, Submission]:
    """``clusterkit submit``: plan once, preflight the plan's nodes (site policy), write the run
    directory, hand it to the site's scheduler and record the job.

    The record store is checked first: a job nobody can follow is not submitted.  ``on_gate``
    sees preflight's verdict before anything is written (a refusal raises
    :class:`PreflightRefused`, which carries the report).
    """
    from clusterkit.scheduler.jobs import submit_run

    store.check_writable()

    def gate(plan: Plan) -> Plan:
        off_shared = planning.run_dir_off_shared(site, plan.run_dir, plan.nnodes)
        if off_shared is not None:  # render shows it as a warning; a job is not queued with it
            raise PlanError(off_shared)
        decided = preflight_gate(site, plan, skip=skip_preflight)
        if on_gate is not None:
            on_gate(decided)
        return decided.plan

    run = render_run(site, request, out, gate=gate)
    return run, submit_run(run, store)


def render_sized(site: Site, sizing: Sizing, command: Sequence[str], out: str | None, *, job_name: str | None,
                 settings: Mapping[str, Any]) -> RenderedRun:
    """``clusterkit plan --render``: the recommended setup (launcher, stage, nodes and its
    settings) through the one render path; the user's ``settings`` win over the plan's."""
    chosen = sizing.recommended
    if chosen is None:
        raise PlanError(f"nothing to render: {sizing.reason}")
    command = (*command, *(a for a in chosen.method.command_args if a not in command))
    values = chosen.settings()
    if sizing.request.shape is not None:  # the micro batch the activations were sized for
        values["micro_batch"] = sizing.request.shape.micro_batch
    # keep what the chosen launcher acts on: torchrun's DDP/FSDP choice lives in the script
    values = {k: v for k, v in values.items() if chosen.method.launcher in settings_mod.used_by(k)}
    values.update(settings)
    request = JobRequest(stage=chosen.layout.stage, command=command, launcher=chosen.method.launcher,
                         nodes=chosen.layout.nodes, gpus_per_node=chosen.layout.gpus_per_node, job_name=job_name,
                         settings=values)
    return render_run(site, request, out)
