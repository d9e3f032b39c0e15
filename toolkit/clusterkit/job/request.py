"""The request, resolved once: what the user asked for (:class:`JobRequest`) against what the
site says, by one precedence rule applied by setting name.

For every setting a site can also set, the value comes from, in order: the command line
(``--launcher``, ``--nodes``, ``--set NAME=...``), the site's ``stages.<stage>`` entry, the
site itself (``scheduler:``, ``preflight:``), then the default.  :func:`resolve` applies it once
per command, so the job name, the launcher and the site's stage entry are worked out once,
before the run directory is claimed, and :func:`clusterkit.job.plan.make_plan` only reads them.

The job's own environment, setup steps, srun and launcher arguments, activation and modules
(:class:`JobSetup`) add up instead: the site's ``job:`` section, then its
``stages.<stage>.job``, then the request's own flags, in that order; for ``env`` a later value
of a name replaces an earlier one, and ``venv``/``conda`` take the precedence rule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Literal, TypeVar

from clusterkit.config.envrules import setup_problem
from clusterkit.config.job_options import SITE_JOB
from clusterkit.config.schema import JobSection, Site, StageOverride
from clusterkit.errors import PlanError
from clusterkit.job import settings as settings_mod
from clusterkit.job import stages
from clusterkit.job.array import ArrayRequest
from clusterkit.job.code import CodeSnapshot
from clusterkit.job.longrun import ChainLink
from clusterkit.job.settings import Settings
from clusterkit.vocab import StageSpec

_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:-]{0,63}")   # ':' too, as Slurm takes it (file names get '-')


@dataclass(frozen=True)
class EnvEntry:
    """One job environment value and where it was given (``site job.env``, ``--env``,
    ``--env-file vars.env:3``), which ``nccl.env`` shows."""

    name: str
    value: str
    origin: str


@dataclass(frozen=True)
class JobSetup:
    """The job's own additions, merged (:func:`merge_job`): site ``job:``, then
    ``stages.<stage>.job``, then the request."""

    env: tuple[EnvEntry, ...] = ()          # one entry per name: the last one given wins
    setup: tuple[str, ...] = ()             # batch-shell commands before the launcher, in order
    node_setup: tuple[str, ...] = ()        # commands once on every node before the launcher
    teardown: tuple[str, ...] = ()          # batch-host commands once the training has ended for good
    srun_args: tuple[str, ...] = ()         # added to every srun step
    launcher_args: tuple[str, ...] = ()     # added to the launcher's own argv
    venv: str | None = None
    conda: str | None = None
    modules: tuple[str, ...] = ()           # loaded after the site's software.modules
    sbatch: tuple[tuple[str, str | None], ...] = ()   # per-job Slurm options (the request's only)

    def to_dict(self) -> dict[str, Any]:
        return {"env": [{"name": e.name, "value": e.value, "origin": e.origin} for e in self.env],
                "setup": list(self.setup), "node_setup": list(self.node_setup),
                "teardown": list(self.teardown),
                "srun_args": list(self.srun_args), "launcher_args": list(self.launcher_args),
                "venv": self.venv, "conda": self.conda, "modules": list(self.modules),
                "sbatch": [[k, v] for k, v in self.sbatch]}


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
    # --debug-nodes: the nodes whose ranks log NCCL INFO (empty: every node, when debug)
    debug_nodes: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    run_dir: str = "."
    # files the command names that the plan checks (read on the submit host by the pipeline):
    # path as written -> (absolute path, text)
    inputs: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # the job's own additions (--env-file lines then --env, --setup, ...), added after the site's
    job: JobSetup = field(default_factory=JobSetup)
    # the command line that asked for the job (the CLI's words, recorded in job.sbatch as data);
    # empty when the Python API builds the request
    origin: tuple[str, ...] = ()
    # the Python that runs the job's supervisor on the batch host; empty: the one that submits
    # (sys.executable, set by actions.render_run)
    python: str = ""
    # the choices among launcher, nodes, gpus_per_node and settings that `plan --render` made
    # (not the user): their source is "plan"
    planned: frozenset[str] = frozenset()
    # the training run across jobs (CK_CHECKPOINT_DIR's last part); None: the job name and its first job id
    run_name: str | None = None
    # what this job waits for (#SBATCH --dependency, from --after and --chain; clusterkit.job.longrun)
    dependency: str | None = None
    chain: ChainLink | None = None   # this job's place in a --chain
    # --array / --sweep: one sbatch, a task per index (clusterkit.job.array)
    array: ArrayRequest | None = None
    # the code snapshot: None: the site's (stage's) code.snapshot; False: --no-snapshot
    snapshot: bool | None = None
    code_dir: str | None = None       # --code DIR: snapshot DIR rather than the working tree
    code: CodeSnapshot | None = None  # the snapshot taken (by actions.render_run), which the job runs in


@dataclass(frozen=True)
class Resolved:
    """A request with every choice the site shares made: what ``make_plan`` plans."""

    request: JobRequest
    spec: StageSpec
    settings: Settings
    job_name: str
    launcher: str
    nodes: int | None           # asked for (command line, then the site's stage); None: the stage default
    time: str
    max_restarts: int
    partition: str | None
    account: str | None
    qos: str | None
    container: bool             # wanted (the site may still have none)
    preflight_in_job: bool | Literal["perf"]   # False, True (the base checks) or "perf" (preflight --perf too)
    gpu_bind: Literal["task", "none"] = "none"  # --launcher srun: each task its own GPU, or the node's
    job: JobSetup = field(default_factory=JobSetup)   # site job:, stage job:, then the request's
    # where each choice came from, by setting name: "flag" (the command line), "plan" (the
    # recommendation of `plan --render`), "stage" (the site's stages.<stage> entry), "site" (the
    # site file), "default"
    sources: Mapping[str, str] = field(default_factory=dict)
    stage_spares: int | str | None = None   # the site's stages.<stage>.spares (job/spares.py decides)
    snapshot: bool = False      # run in a snapshot of the code (request, stage, site's code.snapshot)

    def with_request(self, **changes: Any) -> Resolved:
        """The same choices for the request with ``changes`` that choose nothing (run_dir, inputs)."""
        if set(changes) - {"run_dir", "inputs", "origin", "python", "code"}:
            raise ValueError(f"{sorted(changes)}: only run_dir, inputs, origin, python and code leave the choices "
                             "alone")
        return replace(self, request=replace(self.request, **changes))


T = TypeVar("T")


@dataclass(frozen=True)
class Picked(Generic[T]):
    """What :func:`pick` chose and where it came from: ``flag`` (the command line or the API's
    argument), ``stage`` (the site's ``stages.<stage>`` entry), ``site`` (the site file) or ``default``."""

    value: T
    source: str


def pick(given: T | None, staged: T | None, site_value: T, *, site_set: bool = True) -> Picked[T]:
    """The precedence rule, the one place it is written: ``given`` (the command line or the API's
    argument), else ``staged`` (the site's ``stages.<stage>`` value), else ``site_value`` (the
    site's own where ``site_set``, else the default).  None is "not given" at every level."""
    if given is not None:
        return Picked(given, "flag")
    if staged is not None:
        return Picked(staged, "stage")
    return Picked(site_value, "site" if site_set else "default")


def staged(override: StageOverride | None, name: str) -> Any:
    """The site's ``stages.<stage>.<name>`` (None: the stage does not set it, or has no such key)."""
    return getattr(override, name, None) if override is not None else None


def _picks(site: Site, request: JobRequest, spec: StageSpec, s: Settings,
           override: StageOverride | None) -> dict[str, Picked[Any]]:
    """Every choice by name, each by the precedence rule (:func:`pick`): its value and its source
    (a stage's value looked up by name: None where ``stages.<stage>`` has no such key)."""
    sch = site.scheduler

    def rule(name: str, given: Any, site_value: Any, site_set: bool) -> Picked[Any]:
        return pick(given, staged(override, name), site_value, site_set=site_set)

    # a setting nothing else sets: --set's, else the default
    picks = {key: pick(getattr(s, key) if key in s.model_fields_set else None, None, getattr(s, key), site_set=False)
             for key in Settings.model_fields}
    picks.update({
        "launcher": rule("launcher", request.launcher, spec.default_launcher, False),
        "nodes": rule("nodes", request.nodes, None, False),
        "gpus_per_node": rule("gpus_per_node", request.gpus_per_node, site.nodes.gpus_per_node, True),
        "container": rule("container", s.container, True, site.software.container is not None),
        "spares": rule("spares", s.spares, None, False),
        "gpu_bind": rule("gpu_bind", s.gpu_bind, site.nodes.gpu_bind, "gpu_bind" in site.nodes.model_fields_set),
        "preflight_in_job": rule("preflight_in_job", s.preflight_in_job, site.preflight.in_job,
                                 "in_job" in site.preflight.model_fields_set),
        "snapshot": rule("snapshot", True if request.code_dir is not None else request.snapshot,
                         site.code.snapshot, True),
    })
    for key in ("time", "max_restarts", "partition"):
        picks[key] = rule(key, getattr(s, key), getattr(sch, key),
                          key in sch.model_fields_set and bool(getattr(sch, key)))
    for key in ("account", "qos"):   # an empty one given is none given
        picks[key] = rule(key, getattr(s, key) or None, getattr(sch, key), bool(getattr(sch, key)))
    return picks


def _sources(request: JobRequest, picks: Mapping[str, Picked[Any]]) -> dict[str, str]:
    """Where each choice comes from, by name: its pick's source, but ``plan`` for what
    ``plan --render`` chose (``request.planned``)."""
    out = {key: p.source for key, p in picks.items() if key != "snapshot"}   # the plan shows no snapshot source
    for key in request.planned:  # given by `plan --render`'s recommendation, not typed by the user
        if out.get(key) == "flag":
            out[key] = "plan"
    return out


def resolve(site: Site, request: JobRequest, *, allocates: bool) -> Resolved:
    """Apply the precedence rule to every setting of ``request`` on ``site``, once.  ``allocates``:
    the site's scheduler grants nodes (:class:`clusterkit.job.scheduling.SchedulerParts`), where
    the job can check them first (``preflight_in_job``)."""
    spec = stages.get(request.stage)
    s = settings_mod.build(dict(request.settings))
    override = site.stage_override(spec.name)
    picks = _picks(site, request, spec, s, override)
    return Resolved(
        sources=_sources(request, picks),
        request=request, spec=spec, settings=s, job_name=job_name(request),
        launcher=picks["launcher"].value, nodes=picks["nodes"].value, time=picks["time"].value,
        max_restarts=picks["max_restarts"].value, partition=picks["partition"].value,
        account=picks["account"].value, qos=picks["qos"].value,
        container=picks["container"].value,
        preflight_in_job=_in_job(allocates, picks["preflight_in_job"].value),
        job=merge_job(site, spec.name, override, request.job),
        gpu_bind=picks["gpu_bind"].value,
        stage_spares=override.spares if override is not None else None,
        snapshot=bool(picks["snapshot"].value),
    )


def _in_job(allocates: bool, value: bool | str) -> bool | Literal["perf"]:
    """The in-job preflight: off where the scheduler grants no nodes (local), else the setting
    (``perf`` kept as such)."""
    if not allocates:
        return False
    return "perf" if value == "perf" else bool(value)


def merge_job(site: Site, stage: str, override: StageOverride | None, own: JobSetup) -> JobSetup:
    """Site ``job:``, then ``stages.<stage>.job`` (``override``), then the request's ``own``, each
    key by its rule (:data:`clusterkit.config.job_options.SITE_JOB`): lists add up in that order, a
    later ``env`` value of a name wins, ``venv``/``conda`` by the precedence rule (:func:`pick`)."""
    site_layer = _section(site.job, "site job")
    stage_layer = None
    if override is not None and override.job is not None:
        stage_layer = _section(override.job, f"site stages.{stage}.job")
    layers = [site_layer, *([stage_layer] if stage_layer is not None else []), own]
    for option, text in own.sbatch:   # one form of GPU request: #SBATCH --gpus-per-node=[TYPE:]N
        if option == "gres" and text is not None and any(g.split(":")[0] == "gpu" for g in text.split(",")):
            raise PlanError("asks for GPUs beside the --gpus-per-node clusterkit writes (Slurm may refuse both): "
                            "use --gpus-per-node N and --set gpu_type=TYPE", field="sbatch", value=f"gres={text}")
    merged: dict[str, Any] = {"sbatch": own.sbatch}
    for o in SITE_JOB:
        rule = o.site.merge if o.site is not None else "add"
        if rule == "env":
            env: dict[str, EnvEntry] = {}
            for layer in layers:
                for entry in layer.env:
                    env.pop(entry.name, None)   # the winner takes its place at the end, in given order
                    env[entry.name] = entry
            merged[o.name] = tuple(env.values())
        elif rule == "add":
            merged[o.name] = tuple(item for layer in layers for item in getattr(layer, o.name))
        else:
            merged[o.name] = pick(getattr(own, o.name), getattr(stage_layer, o.name, None),
                                  getattr(site_layer, o.name)).value
    for name in ("setup", "node_setup"):   # the names --env refuses, set by a step's own text
        problem = next(((p, cmd) for cmd in merged[name] if (p := setup_problem(cmd))), None)
        if problem:
            raise PlanError(problem[0], field=name, value=repr(problem[1][:60]))
    return JobSetup(**merged)


def _section(sec: JobSection, where: str) -> JobSetup:
    """A site's ``job:`` section as the layer :func:`merge_job` adds up (``where``: its place, for ``env``)."""
    values: dict[str, Any] = {}
    for o in SITE_JOB:
        value = getattr(sec, o.name)
        if o.site is not None and o.site.merge == "env":
            values[o.name] = tuple(EnvEntry(k, str(v), f"{where}.env") for k, v in value.items())
        else:
            values[o.name] = tuple(value) if isinstance(value, list) else value
    return JobSetup(**values)


def job_name(request: JobRequest) -> str:
    """The job's name: ``--job-name`` (checked), else ``ck-<script>`` from the command."""
    if request.job_name is not None:
        if not _JOB_NAME.fullmatch(request.job_name):
            raise PlanError("use 1-64 letters, digits, '.', '_', '+', ':' or '-'", field="job_name",
                            value=repr(request.job_name))
        return request.job_name
    command = request.command
    script = next((c for c in command[1:] if not c.startswith("-")), command[0] if command else "job")
    base = re.sub(r"[^A-Za-z0-9._+-]", "-", script.rsplit("/", 1)[-1].removesuffix(".py"))[:48].strip("-.")
    return f"ck-{base or 'job'}"
