"""Stage plans: ``make_plan(site, request) -> Plan``, pure and checked before anything is queued.

The plan is the single description of a job: nodes, tasks, launcher invocation, NCCL env,
sbatch directives and the files that go with it.  Rendering turns it into text; nothing
downstream decides anything the plan did not.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from clusterkit import __version__, launchers, nccl, stages
from clusterkit import settings as settings_mod
from clusterkit.errors import PlanError
from clusterkit.launchers import Context, Launch
from clusterkit.nccl import EnvVar
from clusterkit.settings import Settings
from clusterkit.site import Site

_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
_SBATCH_VALUE = re.compile(r"^[^\s\x00-\x1f'\"\\`]+$")
_TIME_RE = re.compile(r"^(\d+-)?\d{1,3}(:\d{2}){0,2}$")


@dataclass(frozen=True)
class JobRequest:
    """What the user asked for on the command line."""

    stage: str
    command: tuple[str, ...]
    launcher: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    job_name: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    debug: bool = False
    exclude: tuple[str, ...] = ()
    run_dir: str = "."
    # files the command names that the plan checks (read on the submit host by the pipeline):
    # path as written -> (absolute path, text)
    inputs: Mapping[str, tuple[str, str]] = field(default_factory=dict)


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
    container: dict[str, Any] | None
    max_restarts: int
    preempt_signal_s: int
    requeue: bool
    time: str
    settings: Settings
    preflight_in_job: bool
    warnings: tuple[str, ...] = ()

    @property
    def slurm(self) -> bool:
        return self.scheduler == "slurm"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description of everything in the plan (plan.json)."""
        d = asdict(self)
        d["launch"] = {"launcher": self.launch.launcher, "mode": self.launch.mode, "line": self.launch.line,
                       "command": list(self.launch.command), "hostfile_dialect": self.launch.dialect.name if self.launch.dialect else None,
                       "files": sorted(self.launch.files), "notes": list(self.launch.notes)}
        d["env"] = [asdict(v) for v in self.env]
        d["sbatch"] = [[k, v] for k, v in self.sbatch]
        d["settings"] = self.settings.model_dump()
        return d


def _job_name(request: JobRequest, command: tuple[str, ...]) -> str:
    if request.job_name is not None:
        if not _JOB_NAME.match(request.job_name):
            raise PlanError(f"--job-name {request.job_name!r}: use 1-64 letters, digits, '.', '_', '+' or '-'")
        return request.job_name
    script = next((c for c in command[1:] if not c.startswith("-")), command[0] if command else "job")
    base = re.sub(r"[^A-Za-z0-9._+-]", "-", script.rsplit("/", 1)[-1].removesuffix(".py"))[:48].strip("-.")
    return f"ck-{base or 'job'}"


def _sbatch(site: Site, s: Settings, nnodes: int, gpn: int, launch: Launch, spec: stages.StageSpec,
            exclude: tuple[str, ...], time: str, max_restarts: int) -> tuple[tuple[str, str | None], ...]:
    sch = site.scheduler
    override = site.stages.get(spec.name)  # type: ignore[call-overload]
    partition = s.partition or (override.partition if override else None) or sch.partition
    tasks = gpn if launch.mode == "per_gpu" else 1
    cpus = s.cpus_per_task or max(1, site.nodes.cpus_per_node // tasks)
    out: list[tuple[str, str | None]] = []
    if partition:
        out.append(("partition", partition))
    for key, value in (("account", s.account or sch.account), ("qos", s.qos or sch.qos)):
        if value:
            out.append((key, value))
    out += [("time", time), ("nodes", str(nnodes)), ("ntasks-per-node", str(tasks)),
            ("gpus-per-node", str(gpn)), ("cpus-per-task", str(cpus))]
    if exclude:
        from clusterkit.nodes import fold
        out.append(("exclude", fold(exclude)))
    if spec.requeue:
        # B: signal only the batch shell; its trap forwards TERM to the launcher (torchrun
        # forwards only INT/TERM/HUP/QUIT, and NCCL itself grabs USR1).
        out.append(("signal", f"B:USR2@{sch.preempt_signal_s}"))
        out.append(("requeue", None) if max_restarts > 0 else ("no-requeue", None))
        out.append(("open-mode", "append"))   # a requeued run appends to the same log
    for name, extra in sorted(sch.sbatch.items()):
        if extra is True:
            out.append((name, None))
        elif extra is not False:
            out.append((name, str(extra)))
    for option, text in out:
        if text is not None and not _SBATCH_VALUE.match(text):
            # #SBATCH lines are comments to bash but a newline would start a live shell line,
            # and sbatch splits values at whitespace.
            raise PlanError(f"sbatch --{option} value {text!r}: whitespace, quotes and control characters are not allowed")
    return tuple(out)


def _context(site: Site, request: JobRequest, s: Settings, nnodes: int, gpn: int, use_container: bool) -> Context:
    hosts = [h for h in site.nodes.hosts if h not in set(request.exclude)]
    if len(hosts) < nnodes:
        raise PlanError(f"{nnodes} nodes requested but only {len(hosts)} of {site.name}'s nodes remain "
                        f"after excluding {len(request.exclude)}")
    return Context(nnodes=nnodes, gpus_per_node=gpn, command=tuple(request.command), settings=s,
                   stage=request.stage, slurm=site.scheduler.kind == "slurm", hosts=tuple(hosts[:nnodes]),
                   run_dir=request.run_dir, container=use_container, site_hosts=tuple(hosts),
                   inputs=request.inputs)


def make_plan(site: Site, request: JobRequest) -> Plan:
    """Check the request against the site and stage, and build the frozen plan."""
    spec = stages.get(request.stage)
    s = settings_mod.build(dict(request.settings))
    warnings = stages.check_site(spec, site)
    nnodes = stages.node_count(spec, site, request.nodes)
    gpn = request.gpus_per_node or site.nodes.gpus_per_node
    if gpn < 1 or gpn > site.nodes.gpus_per_node:
        raise PlanError(f"--gpus-per-node {gpn}: site {site.name} nodes have {site.nodes.gpus_per_node} GPUs")
    unknown = sorted(set(request.exclude) - set(site.nodes.hosts))
    if unknown:
        raise PlanError(f"cannot exclude {', '.join(unknown)}: not in {site.name}'s nodelist {site.nodes.nodelist}")
    override = site.stages.get(spec.name)  # type: ignore[call-overload]
    launcher = request.launcher or (override.launcher if override and override.launcher else spec.default_launcher)
    container_cfg = site.software.container
    wanted = s.container if s.container is not None else (override.container if override and override.container is not None else True)
    use_container = bool(container_cfg) and wanted and site.scheduler.kind == "slurm"
    if s.container and not container_cfg:
        raise PlanError(f"--set container=true but site {site.name} configures no software.container")
    ctx = _context(site, request, s, nnodes, gpn, use_container)
    launch = launchers.get(launcher)(ctx)
    time = s.time or (override.time if override and override.time else None) or site.scheduler.time
    if not _TIME_RE.match(time):
        raise PlanError(f"--set time={time!r}: not a Slurm time (MM, HH:MM:SS or D-HH:MM:SS)")
    max_restarts = s.max_restarts if s.max_restarts is not None else (
        override.max_restarts if override and override.max_restarts is not None else site.scheduler.max_restarts)
    env = nccl.resolve(site, spec.name, debug=request.debug, run_dir=request.run_dir, extra=list(launch.env))
    return Plan(
        version=__version__, site=site.name, site_file=site.source, scheduler=site.scheduler.kind,
        stage=spec.name, launcher=launcher, job_name=_job_name(request, tuple(request.command)),
        nnodes=nnodes, gpus_per_node=gpn, world_size=launch.world_size or nnodes * gpn, hosts=ctx.hosts,
        exclude=tuple(sorted(request.exclude)), command=tuple(request.command), run_dir=request.run_dir,
        launch=launch, env=tuple(env),
        sbatch=_sbatch(site, s, nnodes, gpn, launch, spec, tuple(sorted(request.exclude)), time, max_restarts),
        modules=tuple(site.software.modules),
        container=container_cfg.model_dump() if use_container and container_cfg else None,
        max_restarts=max_restarts, preempt_signal_s=site.scheduler.preempt_signal_s, requeue=spec.requeue,
        time=time, settings=s,
        preflight_in_job=bool(s.preflight_in_job if s.preflight_in_job is not None else site.preflight.in_job),
        warnings=tuple(warnings),
    )
