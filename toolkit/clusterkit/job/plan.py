"""Stage plans: ``make_plan(site, request) -> Plan``, pure and checked before anything is queued.

The plan is the single description of a job: nodes, tasks, launcher invocation, NCCL env,
sbatch directives and the files that go with it.  Rendering turns it into text; nothing
downstream decides anything the plan did not.

A command plans once: the request is resolved against the site first
(:func:`clusterkit.job.request.resolve`: job name, launcher, every setting by the precedence
rule), so the run directory can be claimed before planning; nodes found bad later
(preflight) are taken out with :meth:`Plan.excluding`, which gives what ``make_plan`` would have
given with them in the request's exclude list, without planning again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from clusterkit import __version__
from clusterkit.config.envrules import ENV_REF
from clusterkit.config.schema import OWNED_SBATCH, Container, Site, owned_sbatch
from clusterkit.errors import FieldProblem, PlanError
from clusterkit.job import array as arrays
from clusterkit.job import goodput, jobargs, jobenv, launchers, nccl, stages, torch_version
from clusterkit.job import settings as settings_mod
from clusterkit.job.launchers import Context, Launch
from clusterkit.job.longrun import ChainLink, check_run_name
from clusterkit.job.nccl import EnvVar
from clusterkit.job.request import JobRequest, JobSetup, Resolved, resolve
from clusterkit.job.settings import Settings
from clusterkit.vocab import StageSpec, slurm_seconds

_SBATCH_VALUE = re.compile(r"[^\s\x00-\x1f'\"\\`]+")
#: The longest per-job #SBATCH option (name and value) clusterkit writes.
_SBATCH_MAX = 4096


@dataclass(frozen=True)
class Basis:
    """What :meth:`Plan.excluding` derives from: the site and the launcher's context (not in plan.json)."""

    site: Site
    context: Context
    resolved: Resolved = field(compare=False)  # its request keeps the exclude list it was given


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

    @property
    def allocated(self) -> int:
        """Nodes the job asks Slurm for: ``nnodes`` to launch on, plus the spares."""
        return self.nnodes + self.spares

    @property
    def slurm(self) -> bool:
        return self.scheduler == "slurm"

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
        ctx = _with_hosts(ctx, _candidates(site, exclude, self.nnodes, self.spares))
        if launchers.get(self.launcher)(ctx) != self.launch:  # re-runs the launcher's host checks
            raise AssertionError(f"{self.launcher}: the launch changed with the exclude list; "
                                 "launchers may read the hosts only to refuse a request")
        sbatch = _sbatch(site, self.basis.resolved, self.allocated, self.gpus_per_node, self.launch, exclude)
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
        return d


_MEM_OPTIONS = ("mem", "mem-per-cpu", "mem-per-gpu")


def cpu_share(site: Site, s: Settings, gpn: int, launch: Launch) -> tuple[int, int]:
    """(CPUs per task, OMP threads per rank): a job on some of a node's GPUs gets that share of
    its CPUs; each rank gets its share of its task's CPUs."""
    tasks = gpn if launch.mode == "per_gpu" else 1
    node_share = site.nodes.cpus_per_node * gpn // site.nodes.gpus_per_node
    cpus = s.cpus_per_task or max(1, node_share // tasks)
    ranks_per_task = 1 if launch.mode == "per_gpu" else gpn
    return cpus, max(1, cpus // ranks_per_task)


def _mem_share(site: Site, gpn: int, job_sbatch: tuple[tuple[str, str | None], ...] = ()
               ) -> list[tuple[str, str | None]]:
    """``--mem`` for a job on part of a node: its GPUs' share of the node's memory.

    ``--mem`` (per node) rather than ``--mem-per-gpu``/``--mem-per-cpu``: it is what Slurm users
    read in ``sinfo``/``scontrol show node``, holds whatever the task layout, and does not
    clash with a site's DefMemPerCPU.  A site that sets a memory option itself wins.
    """
    if gpn >= site.nodes.gpus_per_node or any(k in site.scheduler.sbatch for k in _MEM_OPTIONS):
        return []
    if any(k in _MEM_OPTIONS for k, _ in job_sbatch):
        return []
    return [("mem", f"{int(site.nodes.mem_gb * 1024 * gpn // site.nodes.gpus_per_node)}M")]


def _sbatch(site: Site, r: Resolved, nnodes: int, gpn: int, launch: Launch,
            exclude: tuple[str, ...]) -> tuple[tuple[str, str | None], ...]:
    sch = site.scheduler
    tasks = gpn if launch.mode == "per_gpu" else 1
    cpus, _ = cpu_share(site, r.settings, gpn, launch)
    out: list[tuple[str, str | None]] = []
    for key, value in (("partition", r.partition), ("account", r.account), ("qos", r.qos)):
        if value:
            out.append((key, value))
    out += [("time", r.time), ("nodes", str(nnodes)), ("ntasks-per-node", str(tasks)),
            ("gpus-per-node", settings_mod.gpus_per_node(r.settings, gpn)), ("cpus-per-task", str(cpus)),
            *_mem_share(site, gpn, r.job.sbatch)]
    if exclude:
        from clusterkit.hostlist import fold
        out.append(("exclude", fold(exclude)))
    if stages.requeues(r.spec, launch.mode):
        # B: signal only the batch shell; its trap forwards TERM to the launcher (torchrun
        # forwards only INT/TERM/HUP/QUIT, and NCCL itself grabs USR1).
        if r.max_restarts > 0 or slurm_seconds(r.time) > sch.preempt_signal_s + 60:   # room for the warning
            out.append(("signal", f"B:USR2@{sch.preempt_signal_s}"))
        out.append(("requeue", None) if r.max_restarts > 0 else ("no-requeue", None))
        out.append(("open-mode", "append"))   # a requeued run appends to the same log
        if nnodes > 1 and launch.mode != "once" and sch.kind == "slurm":
            # a node's death ends the launch step, not the allocation: the supervisor drops the
            # node, takes a spare and relaunches, or requeues without it (docs/architecture.md §3)
            out.append(("no-kill", None))
    if r.request.dependency:
        # a dependency that can never be met (afterok on a job that failed) ends the job, not a forever-pending one
        out += [("dependency", r.request.dependency), ("kill-on-invalid-dep", "yes")]
    arr = array_plan(site, r.request)
    if arr is not None and site.scheduler.kind == "slurm":   # a local site runs the tasks in turn
        out.append(("array", arr.spec))
    own = dict(r.job.sbatch)   # the job's --sbatch options win over the site's of the same name
    for name, extra in sorted(sch.sbatch.items()):
        if name in own:
            continue
        if extra is True:
            out.append((name, None))
        elif extra is not False:
            out.append((name, str(extra)))
    for option, text in out:
        if text is not None and not _SBATCH_VALUE.fullmatch(text):
            # #SBATCH lines are comments to bash but a newline would start a live shell line,
            # and sbatch splits values at whitespace.
            raise PlanError(f"sbatch --{option} value {text!r}: whitespace, quotes and control characters "
                            "are not allowed")
    for option, text in r.job.sbatch:
        shown = repr(option if text is None else f"{option}={text}"[:80])
        owner = owned_sbatch(option)
        if owner is not None:
            raise PlanError(f"sets --{owner}, which clusterkit writes itself; use {OWNED_SBATCH[owner]}",
                            field="sbatch", value=shown)
        if text is not None and not _SBATCH_VALUE.fullmatch(text):
            raise PlanError("whitespace, quotes and control characters are not allowed in a value "
                            "(#SBATCH lines are read word by word)", field="sbatch", value=shown)
        if len(option) + len(text or "") > _SBATCH_MAX:
            raise PlanError(f"longer than {_SBATCH_MAX} characters: clusterkit writes no longer #SBATCH line",
                            field="sbatch", value=shown)
        out.append((option, text))
    return tuple(out)


def array_plan(site: Site, request: JobRequest) -> arrays.ArrayPlan | None:
    """The request's job array on ``site`` (None: an ordinary job); see :mod:`clusterkit.job.array`."""
    if request.array is None:
        return None
    return arrays.plan(request.array, slurm=site.scheduler.kind == "slurm", site=site.name,
                       max_array_size=site.scheduler.max_array_size)


def _check_preemption(site: Site, launch: Launch, spec: StageSpec, time: str, max_restarts: int,
                      flagged: bool = False) -> None:
    """Refuse what the preemption path cannot serve: no room for the warning, ranks out of reach."""
    if site.scheduler.kind != "slurm" or not (stages.requeues(spec, launch.mode) or flagged):
        return
    signal_s = site.scheduler.preempt_signal_s
    # Slurm checks --signal times about once a minute, so the warning may come up to 60 s early
    if slurm_seconds(time) <= signal_s + 60 and max_restarts > 0:
        raise PlanError(f"time limit {time} leaves no room for the time-limit warning: it must be longer than "
                        f"scheduler.preempt_signal_s {signal_s} s + 60 s (Slurm may signal up to 60 s early); "
                        "or --set max_restarts=0: no warning, no requeue")
    if launch.mode == "once" and max_restarts > 0:
        # The warning reaches the ranks through their Slurm job steps (scancel --signal=TERM);
        # a launcher that starts its workers over SSH/MPI from the batch host has no steps.
        raise PlanError(f"{launch.name} starts "
                        "its workers over SSH from the batch host, outside Slurm's job steps, so a preemption or "
                        "time-limit warning cannot reach every rank and requeue would lose their work: "
                        "use --set max_restarts=0 (no requeue) or a launcher that runs through srun")


def _check_long_run(site: Site, r: Resolved, spec: StageSpec) -> None:
    """A framework's requeue has a requeue to do, a dependency has a Slurm to wait in (the stop
    signal's launchers are settings.USED_BY's; docs/architecture.md: long runs)."""
    s, request = r.settings, r.request
    if s.requeue_by == "framework" and not spec.requeue:
        raise PlanError(f"the {spec.name} stage does not requeue (no time-limit warning, no requeue): "
                        "use a multi-node or large-cluster stage", field="settings.requeue_by", value="framework")
    if (request.dependency or request.chain) and site.scheduler.kind != "slurm":
        raise PlanError(f"site {site.name} is a local site: no Slurm to hold a job until another ends",
                        field="chain" if request.chain else "after")


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


def _exclude_list(site: Site, exclude: Iterable[str]) -> tuple[str, ...]:
    """The exclude list, sorted; every node on it must be one of the site's."""
    listed = tuple(sorted(set(exclude)))
    known = set(site.nodes.hosts)
    unknown = [h for h in listed if h not in known]
    if unknown:
        raise PlanError(f"cannot exclude {', '.join(unknown)}: not in {site.name}'s nodelist {site.nodes.nodelist}")
    return listed


def _candidates(site: Site, exclude: tuple[str, ...], nnodes: int, spares: int = 0) -> tuple[str, ...]:
    """The site's hosts the job may land on, in nodelist order: enough for ``nnodes`` and the spares."""
    wanted = nnodes + spares
    out = set(exclude)
    hosts = tuple(h for h in site.nodes.hosts if h not in out)
    if len(hosts) < wanted:
        asked = f"{nnodes} nodes and {spares} spare(s)" if spares else f"{nnodes} nodes"
        raise PlanError(f"{asked} requested but only {len(hosts)} of {site.name}'s nodes remain "
                        f"after excluding {len(exclude)}" if exclude else
                        f"{asked} requested but site {site.name} has {len(hosts)} nodes")
    return hosts


def _with_hosts(ctx: Context, candidates: tuple[str, ...]) -> Context:
    """The launcher's hosts: the first ``nnodes`` candidates (static hostfile), and all of them."""
    return replace(ctx, hosts=candidates[:ctx.nnodes], site_hosts=candidates)


def _context(site: Site, r: Resolved, nnodes: int, gpn: int, use_container: bool,
             exclude: tuple[str, ...], spares: int = 0) -> Context:
    request = r.request
    ctx = Context(nnodes=nnodes, gpus_per_node=gpn, command=tuple(request.command), settings=r.settings,
                  stage=request.stage, slurm=site.scheduler.kind == "slurm", hosts=(), run_dir=request.run_dir,
                  container=use_container, inputs=request.inputs, launcher_args=r.job.launcher_args,
                  array=request.array is not None, torch_version=torch_version.installed(r.job.venv or r.job.conda))
    return _with_hosts(ctx, _candidates(site, exclude, nnodes, spares))


def _check_spares(site: Site, r: Resolved, nnodes: int) -> int:
    """The spare nodes asked for: only where the job checks its nodes itself (the in-job preflight
    chooses which ``nnodes`` of the allocation it launches on)."""
    spares = r.settings.spares or 0
    if spares and not r.preflight_in_job:
        raise PlanError("spare nodes are chosen by the job's own preflight, which is off: "
                        "add --set preflight_in_job=true (or perf)", field="settings.spares", value=str(spares))
    return spares


def _unused_settings(s: Settings, launcher: str, site: Site) -> list[str]:
    """The --set keys given (not None), in order; :func:`_check_used_key` refuses each it must."""
    return [key for key in sorted(s.model_fields_set) if getattr(s, key) is not None]


def _check_used_key(s: Settings, key: str, launcher: str, site: Site) -> None:
    """Refuse a --set key the launcher or site would ignore: nothing given is silently dropped."""
    users = settings_mod.used_by(key)
    if launcher not in users:
        raise PlanError(f"the {launcher} launcher does not use it; it is used by {', '.join(users)}",
                        field=f"settings.{key}")
    if key in settings_mod.SLURM_ONLY and site.scheduler.kind != "slurm":
        raise PlanError(f"site {site.name} is a local site (no Slurm); "
                        f"{key} applies to Slurm sites only", field=f"settings.{key}")


def _check_job(site: Site, r: Resolved, launch: Launch, nnodes: int, in_container: bool) -> None:
    """The job's own environment and activation, where this job can honour them (docs/architecture.md §3)."""
    job = r.job
    per_node = [e for e in job.env if ENV_REF.search(e.value)]
    if per_node and site.scheduler.kind == "slurm" and launch.mode == "once" and nnodes > 1 and not in_container:
        e = per_node[0]
        raise PlanError(f"{launch.name} starts its workers over SSH from the batch host, outside Slurm, so "
                        f"{e.name}={e.value!r} ({e.origin}) cannot be expanded on each node: use a value without "
                        "${...}, or a launcher that runs through srun")
    if in_container and site.software.container is not None:
        runtime = site.software.container.runtime
        if job.modules:
            raise PlanError("the job runs in the site's container, where the host's modules do not apply "
                            "(build them into the image, or --set container=false)",
                            field="modules", value=" ".join(job.modules))
        if runtime == "apptainer" and (job.venv or job.conda):
            what = "venv" if job.venv else "conda"
            raise PlanError("the site's apptainer container starts the launcher directly, with no shell to "
                            "activate an environment in: build it into the image, or --set container=false",
                            field=what, value=job.venv or job.conda)
    if job.venv and job.conda:
        raise PlanError("give --venv or --conda, not both (each replaces the other's python)", field="venv",
                        value=job.venv)


def _check_job_args(site: Site, r: Resolved, launcher: str) -> None:
    """``--srun-arg`` and ``--launcher-arg`` words (the site's job: section's first): none that
    clusterkit owns, nothing that would end up as the program to run."""
    job, own = r.job, r.request.job
    for words, mine, site_key, check_one in (
            (job.srun_args, own.srun_args, "job.srun_args", jobargs.check_srun),
            (job.launcher_args, own.launcher_args, "job.launcher_args",
             lambda w, origin: _check_launcher(launcher, w, origin))):
        if not words:
            continue
        first_own = len(words) - len(mine)
        if first_own:
            check_one(words[:first_own], f"the site's {site_key}")
        check_one(words, "")
    if job.srun_args and site.scheduler.kind != "slurm":
        raise PlanError(f"site {site.name} is a local site: no srun steps to add them to", field="srun_args",
                        value=repr(job.srun_args[0]))


def _check_not_launched_twice(launch: Launch, command: tuple[str, ...]) -> None:
    """A command that starts the launcher itself (``accelerate launch --config_file x train.py``,
    as scripts write it) would run it inside clusterkit's own."""
    program = launch.words[0] if launch.words else None
    if program and command and os.path.basename(command[0]) == program:
        raise PlanError(f"the command starts {program} itself, which clusterkit already starts for the "
                        f"{launch.launcher} launcher: put its options in --launcher-arg and the training script "
                        "after '--'",
                        field="command", value=repr(" ".join(command[:3])[:80]))


def _check_launcher(launcher: str, words: tuple[str, ...], origin: str) -> None:
    owned = launchers.owned_args(launcher)
    if owned is None:
        raise PlanError(f"the {launcher} launcher starts every rank as an srun task, with no launcher process to "
                        "take arguments: use --srun-arg", field="launcher_args", value=repr(words[0][:60]))
    jobargs.check(words, owned, what=launcher, field="launcher_args", origin=origin)


def run_dir_off_shared(site: Site, run_dir: str, nnodes: int) -> str | None:
    """Why ``run_dir`` cannot serve a job of ``nnodes`` nodes on ``site`` (every node reads the
    hostfile and launcher configs from it), or None.  A preview (``render``) shows it as a
    warning; ``submit`` refuses it (:func:`clusterkit.actions.submit`)."""
    if nnodes < 2 or site.scheduler.kind != "slurm" or not os.path.isabs(run_dir):
        return None
    if site.on_shared_storage(run_dir):
        return None
    shared = [os.path.normpath(st.path) for st in site.shared_storage]
    return (f"run directory {os.path.normpath(run_dir)} is not on {site.name}'s shared storage "
            f"({', '.join(shared) or 'none declared'}), but all {nnodes} nodes read its hostfile and configs: "
            "submit from a login node with --out under a shared path, or declare the filesystem in the site's "
            "storage list with shared: true")


def _check_request(site: Site, r: Resolved) -> tuple[int, int, tuple[str, ...]]:
    """Node count, GPUs per node and exclude list; every independent problem with the request
    (node range, GPUs, exclude list, settings the launcher or site would ignore, a container the
    site lacks) reported at once, not one per attempt."""
    found: list[PlanError] = []

    def attempt(check: Any, *args: Any) -> Any:
        try:
            return check(*args)
        except PlanError as exc:
            found.append(exc)
            return None

    request, s = r.request, r.settings
    nnodes = attempt(stages.node_count, r.spec, site, r.nodes)
    gpn = request.gpus_per_node or site.nodes.gpus_per_node
    if gpn < 1 or gpn > site.nodes.gpus_per_node:
        found.append(PlanError(f"site {site.name} nodes have {site.nodes.gpus_per_node} GPUs", field="gpus_per_node",
                               value=str(gpn)))
    exclude = attempt(_exclude_list, site, request.exclude)
    for key in _unused_settings(s, r.launcher, site):
        attempt(_check_used_key, s, key, r.launcher, site)
    if s.container and not site.software.container:
        found.append(PlanError(f"but site {site.name} configures no software.container", field="settings.container",
                               value="true", sep=" "))
    if len(found) == 1:
        raise found[0]
    if found:  # the one check without a field of its own is the exclude list's
        raise PlanError.about([p for exc in found for p in (exc.problems or (FieldProblem("exclude", str(exc)),))])
    return nnodes, gpn, exclude


def make_plan(site: Site, request: JobRequest | Resolved) -> Plan:
    """Check the request against the site and stage, and build the frozen plan (a request not
    yet resolved is resolved here; a command resolves it first, once)."""
    r = request if isinstance(request, Resolved) else resolve(site, request)
    request, spec, s, launcher, time, max_restarts = r.request, r.spec, r.settings, r.launcher, r.time, r.max_restarts
    warnings = stages.check_site(spec, site)
    nnodes, gpn, exclude = _check_request(site, r)   # every problem with the request at once
    container_cfg = site.software.container
    use_container = bool(container_cfg) and r.container and site.scheduler.kind == "slurm"
    _check_job_args(site, r, launcher)
    spares = _check_spares(site, r, nnodes)
    ctx = _context(site, r, nnodes, gpn, use_container, exclude, spares)
    launch = launchers.get(launcher)(ctx)
    _check_not_launched_twice(launch, request.command)
    _check_preemption(site, launch, spec, time, max_restarts, r.sources.get("max_restarts") == "flag")
    _check_long_run(site, r, spec)
    cpus, omp = cpu_share(site, s, gpn, launch)
    env = nccl.resolve(site, spec.name, debug=request.debug, run_dir=request.run_dir, extra=list(launch.env),
                       omp_threads=omp, job=[(e.name, e.value, e.origin) for e in r.job.env],
                       container=use_container)
    warnings += nccl.plan_warnings(site, env) + jobenv.literal_dollars(r.job.env)
    _check_job(site, r, launch, nnodes, use_container)
    if launch.check_env is not None:
        launch.check_env(env)
    arr = array_plan(site, request)
    sbatch = _sbatch(site, r, nnodes + spares, gpn, launch, exclude)
    off_shared = run_dir_off_shared(site, request.run_dir, nnodes)  # a preview may show it; submit refuses it
    if off_shared is not None:
        warnings.append(f"{off_shared} (`submit` refuses this run directory)")
    name = r.job_name
    return Plan(
        version=__version__, site=site.name, site_file=site.source, scheduler=site.scheduler.kind,
        stage=spec.name, launcher=launcher, job_name=name,
        nnodes=nnodes, gpus_per_node=gpn, world_size=launch.world_size or nnodes * gpn, hosts=ctx.hosts,
        exclude=exclude, command=tuple(request.command), run_dir=request.run_dir,
        launch=launch, env=tuple(env),
        sbatch=sbatch,
        modules=(*site.software.modules, *r.job.modules),
        container=container_cfg if use_container else None,
        max_restarts=max_restarts, preempt_signal_s=site.scheduler.preempt_signal_s,
        grace_s=site.scheduler.grace_s, requeue=stages.requeues(spec, launch.mode) and site.scheduler.kind == "slurm",
        checkpoint_dir=checkpoint_base(site, request.run_dir),
        time=time, settings=s, cpus_per_task=cpus,
        preflight_in_job=r.preflight_in_job, basis=Basis(site, ctx, r), warnings=tuple(warnings), job=r.job,
        run_name=None if request.run_name is None else check_run_name(request.run_name),
        dependency=request.dependency, chain=request.chain,
        array=arr,
        nccl_checks=tuple(nccl.version_checks(site, env)),
        spares=spares,
        cadence=_cadence(site, nnodes * gpn),
    )


def _cadence(site: Site, gpus: int) -> goodput.Cadence | None:
    rel = site.reliability
    return None if gpus < 1 else goodput.cadence(gpus, rel.gpu_failures_per_hour, rel.checkpoint_save_s, rel.restart_s)
