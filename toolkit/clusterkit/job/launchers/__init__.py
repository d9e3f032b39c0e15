"""Launchers: one module each, all built from one host/slot model (docs/architecture.md §4, §5).

A launcher turns a :class:`Context` into a :class:`Launch`: the shell words that start it (with
runtime values such as the rendezvous head as :class:`Sh` expressions), how it is started in
the allocation (once per node through srun, once on the batch host, or once per GPU), the
hostfile dialect it reads, its extra files (ds_config.json, accelerate.yaml, ...) and files
rendered from a template (``.deepspeed_env``), the job-script lines it needs once the
allocation is known, how its own process takes the TERM a warning sends, and the files of the
user's command it checks at render time (:func:`inputs`).  Nothing outside this package tests a
launcher's name.  Launchers never write files and never run anything.

Runtime variables the job script provides (see templates/job-hosts.sbatch.j2):
``CK_RUN_DIR``, ``CK_JOB_ID``, ``CK_HEAD`` (first host of the allocation), ``CK_PORT`` (from the
job id), ``CK_HOSTFILE``; in setup lines ``ck_allocation`` (the allocated hosts, one a line) and
``ck_fail STATUS REASON`` (end the job with a result and its reason); per node ``SLURM_NODEID``
(escaped so each node expands its own).
"""

from __future__ import annotations

import importlib
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import TYPE_CHECKING, Literal

from clusterkit.errors import PlanError

if TYPE_CHECKING:
    from clusterkit.config.launcher_keys import DeclaredLauncher
from clusterkit.job.launchers.words import Sh as Sh
from clusterkit.job.launchers.words import Word as Word
from clusterkit.job.nccl import EnvVar
from clusterkit.job.settings import Settings
from clusterkit.vocab import LAUNCHERS

Mode = Literal["per_node", "once", "per_gpu"]


def shell_join(words: Sequence[Word]) -> str:
    """Quote plain strings with shlex.quote; keep :class:`Sh` words as written."""
    return " ".join(w if isinstance(w, Sh) else shlex.quote(w) for w in words)


@dataclass(frozen=True)
class Dialect:
    """A hostfile dialect: how one host with N slots is written."""

    name: str
    fmt: str  # '{host}' and '{slots}' placeholders

    def line(self, host: str, slots: int) -> str:
        return self.fmt.format(host=host, slots=slots)

    def render(self, hosts: Sequence[str], slots: int) -> str:
        if len(set(hosts)) != len(hosts):
            raise PlanError("hostfile would list a host twice; deepspeed and horovod reject duplicates")
        return "".join(self.line(h, slots) + "\n" for h in hosts)


SLOTS = Dialect("slots", "{host} slots={slots}")      # deepspeed, horovod --hostfile, OpenMPI
BARE = Dialect("bare", "{host}")                      # colossalai


@dataclass(frozen=True)
class Context:
    """What a launcher needs to know: the shape of the job and the user's command."""

    nnodes: int
    gpus_per_node: int
    command: tuple[str, ...]
    settings: Settings
    stage: str
    slurm: bool                       # False on a local site: no srun, no allocation
    hosts: tuple[str, ...]            # candidate hosts (static hostfile); Slurm rewrites at run time
    run_dir: str = "."                # where the rendered files live (absolute in real runs)
    container: bool = False           # the site's container wraps each per-node launcher
    site_hosts: tuple[str, ...] = ()  # every host of the site the job may land on (after --exclude)
    # files the command names that a launcher checks at render time (a user's DeepSpeed config),
    # read by the pipeline on the submit host: path as written -> (absolute path, text)
    inputs: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    launcher_args: tuple[str, ...] = ()   # --launcher-arg words (checked by the plan), after the launcher's own
    array: bool = False                   # a job array (--array/--sweep): {ck:array_index} has a value
    torch_version: str | None = None      # the torch of the job's --venv/--conda, where the submit host can read it
    # where a launcher that keeps per-rank log files writes them (torchrun's --log-dir), with {ck:NAME}
    # values: the run's logs, or a node-local folder above the site's logs.debug_max_nodes (job/debuglogs.py)
    rank_logs: str = ""
    # torchrun's c10d store read timeout, seconds: the site's network.rendezvous_read_timeout_s (None: torch's own)
    rdzv_read_timeout_s: int | None = None

    @property
    def world_size(self) -> int:
        return self.nnodes * self.gpus_per_node

    @property
    def multi(self) -> bool:
        return self.nnodes > 1


@dataclass(frozen=True)
class Launch:
    launcher: str
    mode: Mode
    words: tuple[Word, ...]           # the launcher invocation; the user command follows as "$@"
    command: tuple[str, ...]          # the (possibly adjusted) user command passed as "$@"
    dialect: Dialect | None = None    # hostfile dialect, if the launcher reads one
    files: dict[str, str] = field(default_factory=dict)
    env: tuple[EnvVar, ...] = ()
    notes: tuple[str, ...] = ()       # facts worth showing in plan.json
    world_size: int | None = None     # ranks, where the launcher runs fewer than nodes x GPUs
    setup: tuple[str, ...] = ()       # bash lines the job script runs once the allocation and env are known
    templated: dict[str, str] = field(default_factory=dict)   # artifact name -> template it is rendered from
    # how the launcher's own process takes the TERM a warning sends every process of its Slurm step:
    # "default" (its handler, or it ends), "ignore" (its runner ignores it; a process it starts handles it)
    term: Literal["default", "ignore"] = "default"
    label: str = ""                   # how messages name it, where the launcher name alone is not enough
    # a check on the job's final environment (resolved after the launcher), raising PlanError
    check_env: Callable[[Sequence[EnvVar]], None] | None = None
    # what the user's own command or config decides (launchers/given.py): setting -> (value, where read)
    given: dict[str, tuple[str, str]] = field(default_factory=dict)
    # the launcher's flag that sends one variable to every rank (mpirun's ``-x NAME``): the job script
    # gives it, after the program's name, for each of the job's variables and for ``env_sent``
    env_flag: str = ""
    env_sent: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        return shell_join(self.words)

    @property
    def name(self) -> str:
        return self.label or self.launcher


@dataclass(frozen=True)
class Input:
    """A file the user's command names that the launcher checks at render time, read on the submit host."""

    path: str      # as the command writes it
    what: str      # for messages: "deepspeed: --deepspeed_config ds.json"
    kind: str      # "DeepSpeed config"


_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")


@dataclass(frozen=True)
class PyCommand:
    """A user command split the way python launchers want it."""

    is_python: bool     # the command was `python ...`: the launcher runs python itself
    module: bool        # `python -m pkg`: launchers have their own module flag
    args: tuple[str, ...]


def split_python(command: Sequence[str], launcher: str) -> PyCommand:
    """``python -u train.py --lr 1`` -> script + args, so torchrun/deepspeed can run python themselves."""
    if not command:
        raise PlanError("no command given: put the training command after '--', e.g. -- python train.py")
    head = command[0].rsplit("/", 1)[-1]
    if not _PYTHON.fullmatch(head):
        return PyCommand(False, False, tuple(command))
    rest = list(command[1:])
    while rest and rest[0] in ("-u", "-B", "-O"):
        rest.pop(0)  # unbuffered/no-bytecode flags: the launchers run python unbuffered anyway
    if not rest:
        raise PlanError(f"{launcher}: the command names python but no script or -m module")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise PlanError(f"{launcher}: 'python -m' needs a module name")
        return PyCommand(True, True, tuple(rest[1:]))
    if rest[0].startswith("-"):
        raise PlanError(f"{launcher}: python option {rest[0]!r} before the script is not supported; "
                        "set it through PYTHON* environment variables instead")
    return PyCommand(True, False, tuple(rest))


def for_script(ctx: Context, launcher: str, *names: str) -> tuple[EnvVar, ...]:
    """The settings ``names`` that ``launcher`` hands to the training script (``CK_STRATEGY``,
    ``CK_MICRO_BATCH``: :data:`clusterkit.job.settings.TO_SCRIPT`), for those the user gave
    (``--set``, ``plan --render``); a setting not given is not exported: the script chooses."""
    from clusterkit.job.settings import script_variable

    given = ctx.settings.model_fields_set
    out = []
    for name in names:
        variable = script_variable(name, launcher)
        if variable is None:
            raise AssertionError(f"{launcher} does not hand {name} to the script (job.settings.TO_SCRIPT)")
        if name in given and getattr(ctx.settings, name) is not None:
            out.append(EnvVar(variable, str(getattr(ctx.settings, name)), "launcher",
                              f"--set {name}: {launcher} does not act on it; the training script reads it"))
    return tuple(out)


def rendezvous(ctx: Context) -> Sh:
    """``HEAD:PORT``: the allocation's first host and the port derived from the job id."""
    return Sh('"$CK_HEAD:$CK_PORT"')


#: a site's own launchers by name (site key ``launchers:``; job/launchers/declared.py)
Declared = Mapping[str, "DeclaredLauncher"]


def _module(name: str, declared: Declared | None = None) -> ModuleType | None:
    """The built-in launcher's module; None for one of the site's own (``declared``)."""
    if name not in LAUNCHERS:
        if declared and name in declared:
            return None
        own = f" (this site's own: {', '.join(declared)})" if declared else ""
        raise PlanError(f"unknown launcher {name!r}; valid launchers: {', '.join(LAUNCHERS)}{own}")
    return importlib.import_module(f"clusterkit.job.launchers.{name}")


def get(name: str, declared: Declared | None = None) -> Callable[[Context], Launch]:
    """The launcher's ``build``, with the job's ``--launcher-arg`` words after its own (a module's
    ``extra_args(ctx)`` says which, where it takes some of them itself); ``declared``: the site's own."""
    module = _module(name, declared)
    if module is None:
        # found by name, as the built-in launchers' modules are (each imports this package)
        declared_mod = importlib.import_module("clusterkit.job.launchers.declared")
        assert declared is not None
        build: Callable[[Context], Launch] = declared_mod.builder(name, declared[name])
        extra: Callable[[Context], tuple[str, ...]] = lambda ctx: ctx.launcher_args  # noqa: E731
    else:
        build = module.build
        extra = getattr(module, "extra_args", lambda ctx: ctx.launcher_args)

    def build_with_args(ctx: Context) -> Launch:
        from clusterkit.job.launchers import placeholders

        launch = build(ctx)
        args = extra(ctx)
        placeholders.check(ctx.command, ctx.launcher_args, once_multi=launch.mode == "once" and ctx.multi,
                           array=ctx.array, launcher=launch.name)
        return replace(launch, words=(*launch.words, *args)) if args else launch

    return build_with_args


def owned_args(name: str, declared: Declared | None = None) -> Mapping[str, str] | None:
    """The launcher's own flags that ``--launcher-arg`` may not give, and what sets each; None
    for a launcher with no process of its own to take arguments (srun)."""
    module = _module(name, declared)
    if module is None:
        assert declared is not None
        return declared[name].owned(name)
    owned: Mapping[str, str] | None = getattr(module, "OWNED_ARGS", None)
    return owned


def inputs(name: str, command: Sequence[str], launcher_args: Sequence[str] = (),
           declared: Declared | None = None) -> tuple[Input, ...]:
    """The files of ``command`` (or of the launcher's own arguments) that launcher ``name`` checks
    at render time (its module's ``inputs(command, launcher_args)``, if it has one; a site's own
    launcher has none); the pipeline reads them into :attr:`Context.inputs`."""
    find: Callable[[Sequence[str], Sequence[str]], tuple[Input, ...]] | None = getattr(
        _module(name, declared), "inputs", None)
    return find(command, launcher_args) if find is not None else ()
