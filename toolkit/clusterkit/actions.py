"""The flows the commands share: resolve the request once, claim its run directory, plan once,
gate, write.

``render``, ``submit`` and ``plan --render`` call :func:`render_run`; nothing else builds a run
directory, so ``submit --dry-run`` shows exactly what ``submit`` hands to sbatch.  ``submit``
passes :func:`preflight_gate` in as the gate: it checks the plan's candidate nodes and returns
the plan with the bad ones excluded (:meth:`~clusterkit.job.plan.Plan.excluding`), so the job
is planned once whatever preflight finds.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterkit import rundir, scheduler, slurmclient
from clusterkit.config.load import load_site
from clusterkit.config.schema import Site
from clusterkit.errors import ExitCode, PlanError, PreflightError
from clusterkit.job import launchers
from clusterkit.job import plan as planning
from clusterkit.job import settings as settings_mod
from clusterkit.job.plan import Plan
from clusterkit.job.request import JobRequest, Resolved, resolve
from clusterkit.rundir import RenderedRun

if TYPE_CHECKING:
    from clusterkit.codesnap import Taken
    from clusterkit.preflight.report import NodeResult, PolicyDecision, Report
    from clusterkit.scheduler.jobs import Submission
    from clusterkit.scheduler.records import RecordStore
    from clusterkit.sizing import Sizing


def render_run(site: Site | str, request: JobRequest, out: str | None = None, *,
               gate: Callable[[Plan], Plan] | None = None, write: bool = True,
               submitting: bool = False, checks: Callable[[Plan], None] | None = None) -> RenderedRun:
    """Plan ``request`` on ``site`` once and write the run directory atomically.

    The request is resolved against the site once (job name, launcher, every setting); the run
    directory comes next (the plan records it), then the plan, then ``gate`` (submit's
    preflight), which may refuse or return the plan with nodes excluded; only then is anything
    rendered and written.  Without ``out`` the run directory goes under ``./runs``, or, on a
    Slurm site when the current directory is not on its shared storage, under the first shared
    folder of the user's there (:func:`clusterkit.rundir.default_base`).  On any failure the
    default run directory (created here, where ``--out`` is only checked), and ``./runs`` if it
    was made for it, is removed again.  ``write=False`` renders the same artifacts and writes
    nothing (no directory made either; the run directory is the one a write would make now).
    ``submitting`` (``submit``, ``submit --dry-run``): with the snapshot on (the request's, else the
    stage's or site's ``code.snapshot``; :mod:`clusterkit.codesnap`) the code is snapshotted after
    the run directory is claimed, its tree moves in with the artifacts, and a command whose script
    the snapshot lacks is refused.  ``render`` snapshots only when the request asks (``--snapshot``,
    ``--code``): it previews, and a snapshot per preview would copy the tree each time.
    """
    site_obj = load_site(site) if isinstance(site, str) else site
    parts = scheduler.parts(site_obj.scheduler.kind)
    resolved = resolve(site_obj, request, allocates=parts.allocates)
    inputs = read_inputs(resolved.launcher, request, resolved.job.launcher_args, site_obj.launchers).inputs
    base = None if out else rundir.default_base(site_obj, parts.allocates)
    claim = rundir.resolve_out(out, resolved.job_name, base=base, write=write)
    run_dir = claim.path
    snap = None
    try:
        snap = _snapshot(site_obj, resolved, run_dir, write, submitting)
        plan = planning.make_plan(site_obj, resolved.with_request(run_dir=str(run_dir), inputs=inputs,
                                                                  python=request.python or supervisor_python(),
                                                                  code=snap.info if snap else None),
                                  parts)
        missing = None
        if snap is not None:
            plan, missing = snap.noted(plan, check_script=submitting)
        from clusterkit.history.book import keep_out  # nodes that keep failing: before the gate, as --exclude

        plan = keep_out(site_obj, plan)
        if checks is not None:   # submit's own checks of the plan, before the snapshot's and preflight
            checks(plan)
        if gate is not None:
            if missing is not None:   # before preflight reaches any node
                raise missing
            plan = gate(plan)
        from clusterkit.job import render as render_mod  # jinja2: not on preflight's path

        artifacts = render_mod.render(site_obj, plan)
        if missing is not None:   # after every error of the plan and its templates: the last thing to fix
            raise missing
        if write:
            rundir.write_run_dir(run_dir, artifacts, fill=snap.place if snap else None)
    except BaseException:
        if snap is not None:
            snap.abandon()
        claim.release()  # the default directory (and ./runs) when resolve_out created them
        raise
    return RenderedRun(site_obj, plan, artifacts, run_dir)


def _snapshot(site: Site, resolved: Resolved, run_dir: Path, write: bool, submitting: bool) -> Taken | None:
    """The code snapshot the job runs in (None: off for this job, stage or site, or a render not asking)."""
    asked = resolved.request.snapshot is True or resolved.request.code_dir is not None
    if not resolved.snapshot or not (submitting or asked):
        return None
    from clusterkit import codesnap
    from clusterkit.scheduler.records import records_dir

    s = resolved.settings
    limits = codesnap.Limits(s.code_max_files or site.code.max_files, (s.code_max_mb or site.code.max_mb) << 20)
    return codesnap.take(site, resolved.request.code_dir, run_dir, limits, write=write,
                         skip=(records_dir().parent,))   # clusterkit's own state is no code


def supervisor_python() -> str:
    """The Python the job's supervisor runs under (``exec``'d by the job script) unless the
    request names one (``JobRequest.python``): the interpreter running clusterkit now, which
    has it installed.  The job script checks on the batch host that it runs clusterkit there."""
    python = sys.executable
    if not python or not os.access(python, os.X_OK):
        raise PlanError(f"the Python running clusterkit ({python or 'unknown: sys.executable is empty'}) is not "
                        "an executable file, so the job's supervisor could not start: run clusterkit from an "
                        "installed Python")
    return python


_MAX_INPUT_BYTES = 1 << 20


def read_inputs(launcher: str, request: JobRequest, launcher_args: Sequence[str] = (),
                declared: launchers.Declared | None = None) -> JobRequest:
    """Read, on the submit host, the files of the command (or of the launcher's arguments) the
    launcher checks at render time (a user's own DeepSpeed or accelerate config, whose batch sizes
    or counts must match the world before the job is queued)."""
    read: dict[str, tuple[str, str]] = {}
    for wanted in launchers.inputs(launcher, request.command, launcher_args, declared):
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
    note: str = ""                             # which nodes it checked, and why those

    @property
    def excluded(self) -> list[str]:
        return list(self.decision.exclude) if self.decision is not None else []


SlurmCommand = Callable[[Sequence[str]], str]
# Node states a job can start on now: a node allocated to others is not checked (it may have
# changed by the time the job gets it), a drained, down or failing one is never given out.
_FREE_STATES = frozenset({"IDLE", "MIXED"})


def nodes_to_check(site: Site, plan: Plan, slurm: SlurmCommand | None = None) -> tuple[list[str], str]:
    """The nodes a before-submit preflight checks, and what it says about the choice.

    On a Slurm site: the plan's candidates that are in the job's partition (``--set partition``,
    the site's, else Slurm's default) and idle or mixed (not drained, down or failing), from two
    ``scontrol -o`` calls through ``slurm`` (:func:`clusterkit.slurmclient.require` by default; a
    controller that does not answer is :class:`~clusterkit.errors.SlurmUnreachable`, exit 3).
    A 1-node job on a 4,096-node site checks the nodes it could get, not the site.
    """
    candidates = list(plan.candidates)
    if not plan.slurm:
        return candidates, ""
    from clusterkit.scheduler.slurm.cluster import partitions_and_nodes
    from clusterkit.slurmclient import require

    partitions, nodes = partitions_and_nodes(slurm or require)
    wanted = dict(plan.sbatch).get("partition")
    part = partitions.get(wanted) if wanted else next((p for p in partitions.partitions if p.default), None)
    if part is None:
        where = f"partition {wanted}" if wanted else "Slurm's default partition"
        raise PlanError(f"{where} is not among the cluster's partitions "
                        f"({', '.join(partitions.names) or 'none'})", field="settings.partition", value=wanted)
    from clusterkit import hostlist

    members = set(hostlist.expand(part.nodes)) if part.nodes else set()
    free = [h for h in candidates if h in members and h in nodes
            and nodes[h].usable and nodes[h].state_words & _FREE_STATES]
    note = (f"checking {len(free)} of {len(candidates)} candidate node(s): those of partition {part.name} "
            "that are idle or mixed (not drained, down or allocated)")
    return free, note


def preflight_skip(site: Site, nodes: str | None, transport: str,
                   slurm: slurmclient.Run | None = None) -> dict[str, str]:
    """The nodes a preflight over srun outside a job does not ask, with why: those Slurm has
    drained, down or failing.  A step naming one waits for it, the healthy nodes with it, and
    ends with every node unreachable.  Empty inside a job (its nodes are its own), for other
    transports, and where Slurm does not answer (the step then says what it can)."""
    if (transport in ("ssh", "local") or not scheduler.traits(site.scheduler.kind).queued
            or os.environ.get("SLURM_JOB_ID")):
        return {}
    from clusterkit.preflight.run import resolve_hosts
    from clusterkit.scheduler.slurm.cluster import node_states
    from clusterkit.tooltext import printable

    hosts = resolve_hosts(site, nodes, transport)
    known = node_states(hosts, slurm or slurmclient.run)
    if known is None:
        return {}
    out: dict[str, str] = {}
    for host in hosts:
        node = known.get(host)
        if node is None or node.usable:
            continue
        words = node.state_words
        what = "drained" if words & {"DRAIN", "DRAINED", "DRAINING"} else "down" if "DOWN" in words else "not usable"
        why = f"State={node.state}" + (f", Reason={node.reason}" if node.reason else "")
        out[host] = printable(f"{what} in Slurm ({why}): not checked; the other nodes are")[:300]
    return out


def preflight_gate(site: Site, plan: Plan, *, skip: bool = False, accept_new_host_keys: bool = False,
                   transport: str | None = None, slurm: SlurmCommand | None = None,
                   on_result: Callable[[NodeResult], None] | None = None) -> Gate:
    """Check the nodes ``plan`` could get before a submission; apply the site's policy.

    Runs where the site sets ``preflight.before_submit: true`` or ``transport`` is given (the
    command line's choice of transport; the site's ``preflight.transport`` otherwise).  Elsewhere
    a Slurm job checks its own nodes as its first step (``preflight.in_job``, the default), where
    no SSH to compute nodes is needed.  The nodes checked are :func:`nodes_to_check`.  Under
    policy ``exclude`` the failed and unreachable nodes join the plan's exclude list (so ``#SBATCH
    --exclude`` and plan.json show them); under ``refuse``, or when too few good nodes remain,
    the gate raises :class:`PreflightRefused` carrying the report.
    """
    if skip:
        return Gate(plan, skipped="--skip-preflight")
    if not plan.slurm:
        return Gate(plan, skipped="local site: nothing remote to check "
                                  "(clusterkit preflight --transport local checks this machine)")
    if not site.preflight.before_submit and transport is None:
        in_job = "the job checks its own nodes first" if plan.preflight_in_job else "preflight.in_job is off too"
        return Gate(plan, skipped=f"site {site.name} does not set preflight.before_submit: true ({in_job})")
    from clusterkit import hostlist
    from clusterkit.preflight.run import decide_for_site, run_preflight

    hosts, note = nodes_to_check(site, plan, slurm)
    if not hosts:
        return Gate(plan, skipped=f"{note}: none is free now, so there is nothing to check before the job queues",
                    note=note)
    report = run_preflight(site, stage=plan.stage, nodes=hostlist.fold(hosts),
                           transport=transport or site.preflight.transport, accept_new_host_keys=accept_new_host_keys,
                           on_result=on_result)
    decision = decide_for_site(report, site, nodes_needed=plan.allocated)   # with its spares
    if decision.refuse:
        raise PreflightRefused(decision.reason, report, note)
    return Gate(plan.excluding(decision.exclude), report, decision, note=note)


class PreflightRefused(PreflightError):
    """Preflight's verdict under the site policy: do not submit.  Carries the report to show."""

    def __init__(self, reason: str, report: Report, note: str = ""):
        way_out = ("submit anyway with --skip-preflight, or let the job check its own nodes inside its "
                   "allocation (no SSH to compute nodes needed): preflight.before_submit: false in the site "
                   "file, or --preflight-transport srun")
        super().__init__(f"preflight: not submitting: {reason}; {way_out}")
        self.report = report
        self.note = note  # which nodes were checked, and why those
        if report.unreachable_nodes():
            self.exit_code = ExitCode.UNREACHABLE


def submit(site: Site, request: JobRequest, out: str | None, store: RecordStore, *, skip_preflight: bool = False,
           preflight_transport: str | None = None,
           on_gate: Callable[[Gate], None] | None = None) -> tuple[RenderedRun, Submission]:
    """``clusterkit submit``: plan once, preflight the plan's nodes (site policy), write the run
    directory, hand it to the site's scheduler and record the job.

    The record store is checked first: a job nobody can follow is not submitted.  ``on_gate``
    sees preflight's verdict before anything is written (a refusal raises
    :class:`PreflightRefused`, which carries the report).
    """
    from clusterkit.scheduler.jobs import submit_run

    store.check_writable()
    gated: list[Gate] = []

    def checks(plan: Plan) -> None:
        off_shared = planning.run_dir_off_shared(site, plan.run_dir, plan.nnodes, plan.slurm)
        if off_shared is not None:  # render shows it as a warning; a job is not queued with it
            raise PlanError(off_shared)
        check_array_size(site, plan)   # before preflight: an array Slurm refuses is not worth a check
        check_partition_nodes(site, plan)
        rundir.check_job_dirs(plan.run_dir, plan.checkpoint_dir, plan.run_name)

    def gate(plan: Plan) -> Plan:
        decided = preflight_gate(site, plan, skip=skip_preflight, transport=preflight_transport)
        gated.append(decided)
        if on_gate is not None:
            on_gate(decided)
        return decided.plan

    run = render_run(site, request, out, gate=gate, submitting=True, checks=checks)
    submission = submit_run(run, store)
    if gated and gated[0].report is not None and gated[0].excluded:   # the node history remembers them
        from clusterkit.history.book import record_preflight

        # a history that cannot be written is said by the next render's keep_out, which writes it too
        record_preflight(site.name, gated[0].report, gated[0].excluded, submission.record.job_id)
    return run, submission


def check_array_size(site: Site, plan: Plan, runner: slurmclient.Run | None = None) -> None:
    """Refuse, before queueing, an array whose largest index reaches the cluster's MaxArraySize:
    the site's ``scheduler.max_array_size`` (checked when planning), else Slurm's own
    (``scontrol show config``).  An array that fits, or no answer from Slurm, passes: sbatch
    has the last word."""
    if plan.array is None or site.scheduler.max_array_size is not None or not plan.slurm:
        return
    from clusterkit.job.array import check_size
    from clusterkit.scheduler.slurm.cluster import max_array_size

    value = max_array_size(runner or slurmclient.run)
    if value is not None:
        check_size(plan.array, value, "Slurm's scontrol show config")


def check_partition_nodes(site: Site, plan: Plan, runner: slurmclient.Run | None = None) -> None:
    """Refuse, before queueing, a job for a partition (``stages.<stage>.partition``, ``--set
    partition``) that holds none of the site's nodes: a site file describes one set of nodes, so
    its node list, excludes and spares would be another partition's.  Two partitions with their
    own nodes are two site files sharing a partial.  The site's own ``scheduler.partition``, a
    partition Slurm does not list, or no answer from Slurm passes: sbatch has the last word."""
    wanted = dict(plan.sbatch).get("partition")
    if not plan.slurm or not wanted or wanted == site.scheduler.partition:
        return
    from clusterkit import hostlist
    from clusterkit.scheduler.slurm.cluster import partition

    part = partition(wanted, runner or slurmclient.run)
    if part is None:
        return
    try:
        members = set(hostlist.expand(part.nodes)) if part.nodes else set()
    except hostlist.HostlistError:
        return
    if members.isdisjoint(site.nodes.hosts):
        where = f"site {site.name}'s nodes ({site.nodes.nodelist})"
        raise PlanError(f"partition {wanted} holds none of {where}: a site file describes one partition's "
                        "nodes; for another partition with its own nodes write a second site file, both "
                        "extending one shared partial (README: Two partitions)", field="settings.partition",
                        value=wanted)


def render_sized(site: Site, sizing: Sizing, command: Sequence[str], out: str | None, *, job_name: str | None,
                 settings: Mapping[str, Any], origin: tuple[str, ...] = (), keep_checkpoints: int = 2) -> RenderedRun:
    """``clusterkit plan --render``: the recommended setup (launcher, stage, nodes and its
    settings) through the one render path; the user's ``settings`` win over the plan's."""
    chosen = sizing.recommended
    if chosen is None:
        raise PlanError(f"nothing to render: {sizing.reason}")
    command = (*command, *(a for a in chosen.method.command_args if a not in command))
    values = chosen.settings()
    if sizing.request.shape is not None:  # the micro batch the activations were sized for
        values["micro_batch"] = sizing.request.shape.micro_batch
    # keep what the chosen launcher takes (torchrun hands strategy to the script as CK_STRATEGY;
    # an offload it cannot do is the script's choice, as `plan` says)
    values = {k: v for k, v in values.items() if chosen.method.launcher in settings_mod.used_by(k)}
    allocates = scheduler.traits(site.scheduler.kind).allocates
    values.update(settings_mod.room_settings(settings, site.preflight.in_job, allocates,
                                             sizing.request.total_params, keep_checkpoints))
    # what the recommendation chose shows as "plan"; what the user fixed (plan --nodes/--gpus/
    # --launcher/--offload, --set) as "flag"
    fixed = set(settings) | {name for name, given in (
        ("nodes", sizing.request.nodes is not None or sizing.request.gpus is not None),
        ("gpus_per_node", sizing.request.gpus is not None),
        ("launcher", sizing.request.launcher is not None),
        ("offload", sizing.request.offload is not None)) if given}
    planned = frozenset({"launcher", "nodes", "gpus_per_node", *values} - fixed)
    values.update(settings)
    request = JobRequest(stage=chosen.layout.stage, command=command, launcher=chosen.method.launcher,
                         nodes=chosen.layout.nodes, gpus_per_node=chosen.layout.gpus_per_node, job_name=job_name,
                         settings=values, origin=origin, planned=planned)
    return render_run(site, request, out)
