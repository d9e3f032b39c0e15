"""Stage plans: ``make_plan(site, request) -> Plan``, pure and checked before anything is queued.

The plan is the single description of a job: nodes, tasks, launcher invocation, NCCL env,
sbatch directives and the files that go with it.  Rendering turns it into text; nothing
downstream decides anything the plan did not.

A command plans once: the request is resolved against the site first
(:func:`clusterkit.job.request.resolve`: job name, launcher, every setting by the precedence
rule), so the run directory can be claimed before planning; nodes found bad later
(preflight) are taken out with :meth:`Plan.excluding`, which gives what ``make_plan`` would have
given with them in the request's exclude list, without planning again.

What it refuses is in :mod:`clusterkit.job.plan_checks`; the node shares are
:mod:`clusterkit.job.shares`.  Planning names no scheduler: the directives (``#SBATCH`` lines) and
the entry template are the site's scheduler's, handed in by the caller as a
:class:`~clusterkit.job.scheduling.SchedulerParts` (``clusterkit.scheduler.parts(kind)``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from clusterkit._version import __version__
from clusterkit.config.schema import Container, Site
from clusterkit.job import array as arrays
from clusterkit.job import debuglogs, goodput, import_storm, jobenv, launchers, nccl, stages, torch_version
from clusterkit.job.code import CodeSnapshot
from clusterkit.job.launchers import Context, Launch
from clusterkit.job.longrun import ChainLink, check_run_name
from clusterkit.job.nccl import EnvVar
from clusterkit.job.plan_checks import (
    _candidates,
    _check_job,
    _check_job_args,
    _check_long_run,
    _check_not_launched_twice,
    _check_preemption,
    _check_request,
    _check_spares,
    _exclude_list,
    run_dir_off_shared,
)
from clusterkit.job.request import JobRequest, JobSetup, Resolved, resolve
from clusterkit.job.scheduling import SchedulerParts
from clusterkit.job.settings import Settings
from clusterkit.job.shares import array_plan, cpu_share

__all__ = ["Basis", "Plan", "array_plan", "checkpoint_base", "cpu_share", "make_plan", "run_dir_off_shared"]


@dataclass(frozen=True)
class Basis:
    """What :meth:`Plan.excluding` derives from: the site, the launcher's context and the site's
    scheduler (not in plan.json)."""

    site: Site
    context: Context
    resolved: Resolved = field(compare=False)  # its request keeps the exclude list it was given
    scheduler: SchedulerParts = field(compare=False)


@dataclass(frozen=True)
class Plan:
    version: str
    site: str
    site_file: str
    scheduler: str                      # slurm | local
    stage: str
    launcher: str
    job_name: str
    nnodes: int
    gpus_per_node: int
    world_size: int
    hosts: tuple[str, ...]              # candidate hosts; under Slurm the allocation decides
    exclude: tuple[str, ...]
    command: tuple[str, ...]
    run_dir: str
    launch: Launch
    env: tuple[EnvVar, ...]
    sbatch: tuple[tuple[str, str | None], ...]   # (option, value or None for flags), in order
    modules: tuple[str, ...]
    container: Container | None         # the site's container, when this job runs in it
    max_restarts: int
    preempt_signal_s: int
    grace_s: int                        # seconds the ranks get to save after SIGTERM
    requeue: bool
    checkpoint_dir: str                 # on shared storage; the script appends the run name (CK_CHECKPOINT_DIR)
    time: str
    settings: Settings
    preflight_in_job: bool | Literal["perf"]   # "perf": the job's preflight adds --perf
    basis: Basis = field(repr=False)
    cpus_per_task: int = 1              # every srun step asks for it: since Slurm 22.05 srun need not take sbatch's
    warnings: tuple[str, ...] = ()
    job: JobSetup = field(default_factory=JobSetup)   # the job's env, setup steps, args, activation
    run_name: str | None = None         # --run-name; None: the job name and its first job id (job/longrun.py)
    dependency: str | None = None       # #SBATCH --dependency (--after, --chain)
    chain: ChainLink | None = None      # this job's place in a --chain
    array: arrays.ArrayPlan | None = None             # --array / --sweep: a task per index
    # what the NCCL rules assume about NCCL's version, checked by the job against the one it finds
    nccl_checks: tuple[nccl.VersionCheck, ...] = ()
    spares: int = 0                     # allocated beyond nnodes; the in-job preflight picks the nnodes used
    cadence: goodput.Cadence | None = None   # how often to checkpoint (CK_CHECKPOINT_INTERVAL_S)
    code: CodeSnapshot | None = None    # the snapshot of the code the job runs in (its working directory)

    @property
    def allocated(self) -> int:
        """Nodes the job asks Slurm for: ``nnodes`` to launch on, plus the spares."""
        return self.nnodes + self.spares

    @property
    def slurm(self) -> bool:
        """The site's scheduler allocates nodes and launches in job steps (Slurm's way)."""
        return self.basis.scheduler.allocates

    @property
    def candidates(self) -> tuple[str, ...]:
        """Every host the job may land on: the site's nodes less the exclude list, in nodelist order."""
        return self.basis.context.site_hosts

    def excluding(self, nodes: Iterable[str]) -> Plan:
        """This plan with ``nodes`` kept out of the job too: equal to what :func:`make_plan` gives
        with them added to the request's exclude list, and refused with the same PlanError (a
        node not on the site, too few nodes left, a launcher's host filter naming one of them).

        Only the hosts depend on the exclude list: the candidate hosts, ``#SBATCH --exclude`` and
        the launcher's host checks are derived again; a launcher reads hosts only to refuse.
        """
        exclude = _exclude_list(self.basis.site, (*self.exclude, *nodes))
        if exclude == self.exclude:
            return self
        site, ctx = self.basis.site, self.basis.context
        r = self.basis.resolved
        if _check_spares(site, r, self.nnodes, exclude, self.slurm)[0] != self.spares:   # a default that no longer fits
            return make_plan(site, replace(r, request=replace(r.request, exclude=exclude)), self.basis.scheduler)
        ctx = _with_hosts(ctx, _candidates(site, exclude, self.nnodes, self.spares))
        if launchers.get(self.launcher, site.launchers)(ctx) != self.launch:  # re-runs the launcher's host checks
            raise AssertionError(f"{self.launcher}: the launch changed with the exclude list; "
                                 "launchers may read the hosts only to refuse a request")
        sbatch = self.basis.scheduler.directives(site, r, self.allocated, self.gpus_per_node, self.launch, exclude)
        return replace(self, hosts=ctx.hosts, exclude=exclude, sbatch=sbatch, basis=replace(self.basis, context=ctx))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description of everything in the plan (plan.json)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "basis"}
        d["container"] = self.container.model_dump() if self.container else None
        d["launch"] = {"launcher": self.launch.launcher, "mode": self.launch.mode, "line": self.launch.line,
                       "command": list(self.launch.command),
                       "hostfile_dialect": self.launch.dialect.name if self.launch.dialect else None,
                       "files": sorted(self.launch.files), "notes": list(self.launch.notes)}
        d["env"] = [asdict(v) for v in self.env]
        d["sbatch"] = [[k, v] for k, v in self.sbatch]
        d["settings"] = self.settings.model_dump()
        d["job"] = self.job.to_dict()
        d["chain"] = asdict(self.chain) if self.chain is not None else None
        d.pop("array")
        if self.array is not None:   # only a job array's plan has the key
            d["array"] = self.array.to_dict()
        d["nccl_checks"] = [c.to_dict() for c in self.nccl_checks]
        d["cadence"] = self.cadence.to_dict() if self.cadence is not None else None
        d["code"] = self.code.to_dict() if self.code is not None else None
        return d


def checkpoint_base(site: Site, run_dir: str) -> str:
    """Where CK_CHECKPOINT_DIR lives (the job appends its user and run name): the site's shared
    checkpoint storage, else any shared storage, else (one machine, no storage entries) ``checkpoints``
    beside the run directories (``./runs/checkpoints``), where the next job of the run name finds them."""
    shared = site.shared_storage
    pick = next((s for s in shared if "checkpoints" in s.use), None) or (shared[0] if shared else None)
    pick = pick or next((s for s in site.storage if "checkpoints" in s.use), None)
    if pick is None:
        return os.path.dirname(run_dir.rstrip("/")).rstrip("/") + "/checkpoints"
    return f"{pick.path.rstrip('/')}/checkpoints"


def _with_hosts(ctx: Context, candidates: tuple[str, ...]) -> Context:
    """The launcher's hosts: the first ``nnodes`` candidates (static hostfile), and all of them."""
    return replace(ctx, hosts=candidates[:ctx.nnodes], site_hosts=candidates)


def _context(site: Site, r: Resolved, nnodes: int, gpn: int, use_container: bool,
             exclude: tuple[str, ...], spares: int, allocates: bool) -> Context:
    request = r.request
    ctx = Context(nnodes=nnodes, gpus_per_node=gpn, command=tuple(request.command), settings=r.settings,
                  stage=request.stage, slurm=allocates, hosts=(), run_dir=request.run_dir,
                  container=use_container, inputs=request.inputs, launcher_args=r.job.launcher_args,
                  array=request.array is not None, torch_version=torch_version.installed(r.job.venv or r.job.conda),
                  rank_logs=debuglogs.rank_logs(site, request.run_dir, nnodes),
                  rdzv_read_timeout_s=site.network.rendezvous_read_timeout_s)
    return _with_hosts(ctx, _candidates(site, exclude, nnodes, spares))


def make_plan(site: Site, request: JobRequest | Resolved, scheduler: SchedulerParts) -> Plan:
    """Check the request against the site and stage, and build the frozen plan (a request not
    yet resolved is resolved here; a command resolves it first, once).  ``scheduler``: the site's
    scheduler's share (its directives, its entry template)."""
    if scheduler.kind != site.scheduler.kind:
        raise ValueError(f"a {scheduler.kind} scheduler for a {site.scheduler.kind} site")
    r = request if isinstance(request, Resolved) else resolve(site, request, allocates=scheduler.allocates)
    request, spec, s, launcher, time, max_restarts = r.request, r.spec, r.settings, r.launcher, r.time, r.max_restarts
    warnings = stages.check_site(spec, site, scheduler.allocates)
    nnodes, gpn, exclude = _check_request(site, r, scheduler.allocates)   # every problem with the request at once
    container_cfg = site.software.container
    use_container = bool(container_cfg) and r.container and scheduler.allocates
    _check_job_args(site, r, launcher, scheduler.allocates)
    spares, spares_note = _check_spares(site, r, nnodes, exclude, scheduler.allocates)
    ctx = _context(site, r, nnodes, gpn, use_container, exclude, spares, scheduler.allocates)
    launch = launchers.get(launcher, site.launchers)(ctx)
    _check_not_launched_twice(launch, request.command)
    _check_preemption(site, launch, spec, time, max_restarts, r.sources.get("max_restarts") == "flag",
                      scheduler.allocates)
    _check_long_run(site, r, spec, scheduler.allocates)
    debuglogs.check(site, nnodes, request.debug, request.debug_nodes, launch.mode != "once")
    cpus, omp = cpu_share(site, s, gpn, launch)
    env = nccl.resolve(site, spec.name, debug=request.debug, debug_nodes=request.debug_nodes,
                       run_dir=request.run_dir, extra=list(launch.env),
                       omp_threads=omp, job=[(e.name, e.value, e.origin) for e in r.job.env],
                       container=use_container, node_local=nnodes > site.logs.debug_max_nodes)
    warnings += nccl.plan_warnings(site, env) + jobenv.literal_dollars(r.job.env)
    warnings += import_storm.warning(site, r.job, nnodes, scheduler.allocates)
    if spares_note:
        warnings.append(spares_note)
    _check_job(site, r, launch, nnodes, use_container, scheduler.allocates)
    if launch.check_env is not None:
        launch.check_env(env)
    arr = array_plan(site, request, scheduler.allocates)
    sbatch = scheduler.directives(site, r, nnodes + spares, gpn, launch, exclude)
    # a preview may show it; submit refuses it
    off_shared = run_dir_off_shared(site, request.run_dir, nnodes, scheduler.allocates)
    if off_shared is not None:
        warnings.append(f"{off_shared} (`submit` refuses this run directory)")
    name = r.job_name
    return Plan(
        version=__version__, site=site.name, site_file=site.source, scheduler=scheduler.kind,
        stage=spec.name, launcher=launcher, job_name=name,
        nnodes=nnodes, gpus_per_node=gpn, world_size=launch.world_size or nnodes * gpn, hosts=ctx.hosts,
        exclude=exclude, command=tuple(request.command), run_dir=request.run_dir,
        launch=launch, env=tuple(env),
        sbatch=sbatch,
        modules=(*site.software.modules, *r.job.modules),
        container=container_cfg if use_container else None,
        max_restarts=max_restarts, preempt_signal_s=site.scheduler.preempt_signal_s,
        grace_s=site.scheduler.grace_s, requeue=stages.requeues(spec, launch.mode) and scheduler.allocates,
        checkpoint_dir=checkpoint_base(site, request.run_dir),
        time=time, cpus_per_task=cpus,   # status judges stragglers by plan.json's ratio: the site's where not set
        settings=s if s.straggler_ratio is not None else s.model_copy(
            update={"straggler_ratio": site.watch.straggler_ratio}),
        preflight_in_job=r.preflight_in_job, basis=Basis(site, ctx, r, scheduler), warnings=tuple(warnings), job=r.job,
        run_name=None if request.run_name is None else check_run_name(request.run_name),
        dependency=request.dependency, chain=request.chain,
        array=arr,
        nccl_checks=tuple(nccl.version_checks(site, env)),
        spares=spares,
        cadence=_cadence(site, nnodes * gpn),
        code=request.code,
    )


def _cadence(site: Site, gpus: int) -> goodput.Cadence | None:
    rel = site.reliability
    return None if gpus < 1 else goodput.cadence(gpus, rel.gpu_failures_per_hour, rel.checkpoint_save_s, rel.restart_s)
