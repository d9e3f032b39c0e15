"""DeepSpeed: the ``deepspeed`` launcher with a ``host slots=N`` hostfile and a generated ds_config.json.

Default on Slurm (``ds_launcher=no_ssh``): one ``deepspeed --no_ssh --node_rank $SLURM_NODEID`` per
node through srun, all reading the hostfile written from the allocation: no SSH between nodes
and no pdsh.  ``ds_launcher=pdsh``: one ``deepspeed`` on the batch host that reaches the others
over pdsh/SSH; env it must carry goes into ``.deepspeed_env`` (pdsh starts a clean shell), and the
job script copies it per attempt with the values only known at run time (per-job log names).

The config: a user's own ``--deepspeed PATH`` (transformers' TrainingArguments) or
``--deepspeed_config PATH`` (``deepspeed.add_config_arguments``) always wins, and no flag is added;
otherwise clusterkit writes ds_config.json and tells the script by ``ds_args``: ``deepspeed``
(``--deepspeed_config PATH``), ``hf`` (``--deepspeed PATH``) or ``none``.  ``CK_DS_CONFIG`` names
the config either way.

The batch identity DeepSpeed enforces at start-up is checked here, before the queue wait, on
the world left after ``include``/``exclude_slots``:
``train_batch_size == train_micro_batch_size_per_gpu * gradient_accumulation_steps * dp``.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from clusterkit.errors import PlanError
from clusterkit.job.launchers import SLOTS, Context, Input, Launch, Mode, Sh, Word, given, split_python
from clusterkit.job.nccl import EnvVar
from clusterkit.job.settings import Settings

_RDZV = "clusterkit (the allocation's first host, on the job's port)"
_COUNTS = "--nodes and --gpus-per-node (or the stage)"
#: deepspeed runner flags clusterkit writes (``--launcher-arg`` refuses them), and what sets them instead.
OWNED_ARGS = {
    "--num_gpus": _COUNTS, "--num_nodes": _COUNTS,
    "--hostfile": "clusterkit (the hostfile written from the allocation)",
    "--include": "--set include=...", "--exclude": "--set exclude_slots=... (or --exclude for whole nodes)",
    "--master_addr": _RDZV, "--master_port": _RDZV, "--node_rank": "clusterkit (each node's rank from the allocation)",
    "--launcher": "--set ds_launcher=no_ssh|pdsh", "--no_ssh": "--set ds_launcher=no_ssh|pdsh",
    "--force_multi": _COUNTS, "--no_python": "the command after '--' (python or not)",
    "--module": "the command after '--' (python -m)",
}
_SPEC = re.compile(r"[A-Za-z0-9._-]+(:\d+(,\d+)*)?")
# DeepSpeed's pdsh runner joins one remote shell line: it leaves arguments that start with '-'
# bare, puts others in single quotes without escaping, and wraps .deepspeed_env values in double
# quotes ($ and ` still expand).  Only words needing no quoting at all are safe there.
_PDSH_SAFE = re.compile(r"[A-Za-z0-9_./=:,@+-]*")


def check_pdsh_safe(value: str, what: str) -> str:
    """Refuse a word DeepSpeed's pdsh runner would hand to a remote shell half-quoted."""
    if not _PDSH_SAFE.fullmatch(value):
        raise PlanError(f"ds_launcher=pdsh: {what} {value!r} has characters outside [A-Za-z0-9_./=:,@+-]; "
                        "DeepSpeed's pdsh runner passes it to a remote shell with only partial quoting "
                        "(use ds_launcher=no_ssh, the default)")
    return value


def check_pdsh_env(env: Iterable[Any]) -> None:
    """``.deepspeed_env`` is read back line by line and exported unquoted on every node."""
    for var in env:
        if getattr(var, "shell", None) is None:   # run-time values: the job script checks them (pdsh_env_setup)
            check_pdsh_safe(str(var.value), f"environment value {var.name}=")


#: Values that expand at run time (job id, restart), so .deepspeed_env cannot hold them when rendered.
RUN_TIME_ENV = ("NCCL_DEBUG_FILE", "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                "TORCH_FR_DEBUG_INFO_PIPE_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE")


def pdsh_env_setup() -> tuple[str, ...]:
    """Job-script lines: a per-attempt copy of ``.deepspeed_env`` with the run-time values the batch
    shell expanded (DeepSpeed 0.19's runner reads ``DS_ENV_FILE`` as KEY=VALUE lines and pastes them
    into ``export KEY=VALUE;`` on the pdsh line).  pdsh replaces ``%h``, ``%n`` and ``%u`` in that
    line and ``%%`` with ``%``, so every ``%`` is written doubled: NCCL_DEBUG_FILE's ``%h``/``%p``
    reach NCCL, which names the file by host and process.  A value pdsh cannot carry is left out,
    and said."""
    why = ("ds_launcher=pdsh: $ck_ds_name left out of $ck_ds_env: its value has characters outside "
           "[A-Za-z0-9_./=:,@+%-] that DeepSpeed's pdsh runner cannot carry to the other nodes")
    return (
        'ck_ds_env="$CK_RUN_DIR/.deepspeed_env.$CK_JOB_ID.r${SLURM_RESTART_COUNT:-0}"',
        'cp -- "$CK_RUN_DIR/.deepspeed_env" "$ck_ds_env" || ck_fail 1 "cannot write $ck_ds_env"',
        "ck_ds_safe='^[A-Za-z0-9_./=:,@+%-]*$'",
        f"for ck_ds_name in {' '.join(RUN_TIME_ENV)}; do",
        '  [ -n "${!ck_ds_name+x}" ] || continue',
        '  if [[ ${!ck_ds_name} =~ $ck_ds_safe ]]; then',
        '    ck_ds_value=${!ck_ds_name}',
        '    printf \'%s=%s\\n\' "$ck_ds_name" "${ck_ds_value//%/%%}" >> "$ck_ds_env" ||',
        '      ck_fail 1 "cannot write $ck_ds_env"',
        "  else",
        f'    ck_log "{why}"',
        "  fi",
        "done",
        'export DS_ENV_FILE="$ck_ds_env"',
    )


@dataclass(frozen=True)
class Filter:
    """A deepspeed ``--include``/``--exclude`` NODE_SPEC[@NODE_SPEC...], merged per host as
    DeepSpeed's parse_node_config_list does (slots of one host united; no slots = every slot)."""

    what: str                              # include | exclude_slots (the --set key)
    text: str
    hosts: dict[str, tuple[int, ...]]

    @property
    def flag(self) -> str:
        return "--include" if self.what == "include" else "--exclude"

    def slots(self, host: str, gpn: int) -> int:
        return len(self.hosts[host]) or gpn


def check_filter(text: str, ctx: Context, what: str) -> Filter:
    """Validate a deepspeed NODE_SPEC[@NODE_SPEC...] string: 0-based slots below gpus_per_node."""
    hosts: dict[str, set[int]] = {}
    for spec in text.split("@"):
        if not _SPEC.fullmatch(spec):
            raise PlanError(f"deepspeed {what} {text!r}: {spec!r} is not HOST or HOST:SLOT[,SLOT...]")
        host, _, slots = spec.partition(":")
        for slot in filter(None, slots.split(",")):
            if int(slot) >= ctx.gpus_per_node:
                raise PlanError(f"deepspeed {what} {text!r}: slot {slot} on {host} "
                                f"is out of range 0-{ctx.gpus_per_node - 1}")
        hosts.setdefault(host, set()).update(int(x) for x in filter(None, slots.split(",")))
    return Filter(what, text, {h: tuple(sorted(v)) for h, v in hosts.items()})


def _filter_hosts(f: Filter, ctx: Context) -> None:
    """Host names a filter may use: deepspeed's single-node pool is 'localhost'; else the site's."""
    known = ctx.site_hosts if ctx.multi else ("localhost",)
    where = "the site's nodes" if ctx.multi else "a single-node job (deepspeed calls its one host 'localhost')"
    unknown = [h for h in f.hosts if h not in known]
    if unknown:
        raise PlanError(f"deepspeed {f.what} {f.text!r}: {', '.join(unknown)} is not one of {where}")


def filtered_world(f: Filter, ctx: Context, no_ssh: bool) -> int:
    """Ranks left after the filter; refuses what DeepSpeed would get wrong or run on nothing."""
    _filter_hosts(f, ctx)
    gpn = ctx.gpus_per_node
    whole = [h for h in f.hosts if f.slots(h, gpn) == gpn]
    if f.what == "include":
        if no_ssh and len(f.hosts) != ctx.nnodes:
            # --no_ssh numbers nodes by SLURM_NODEID over the whole allocation; a host left out
            # of --include would shift every rank after it.
            raise PlanError(f"deepspeed include {f.text!r} names {len(f.hosts)} host(s) for a {ctx.nnodes}-node job: "
                            "with ds_launcher=no_ssh include must name every allocated host (ask for fewer --nodes, "
                            "or use ds_launcher=pdsh)")
        world = sum(f.slots(h, gpn) for h in f.hosts)
    else:
        if no_ssh and whole:
            raise PlanError(f"deepspeed exclude_slots {f.text!r} drops every slot of {', '.join(whole)}: with "
                            "ds_launcher=no_ssh node ranks come from SLURM_NODEID and would be wrong; leave the node "
                            "out of the allocation with --exclude instead")
        world = ctx.nnodes * gpn - sum(f.slots(h, gpn) for h in f.hosts)
    if world < 1:
        raise PlanError(f"deepspeed {f.what} {f.text!r} leaves no slots to run on")
    return world


def allocation_check(f: Filter) -> tuple[str, ...]:
    """Job-script lines: every host the filter names must be in the allocation Slurm granted
    (deepspeed would otherwise stop with a traceback on every node)."""
    hosts = " ".join(shlex.quote(h) for h in f.hosts)
    why = (shlex.quote(f"deepspeed {f.what} {f.text}: host ") + '"$ck_ds_host"'
           + shlex.quote(" is not among the allocated nodes ") + '"$SLURM_JOB_NODELIST"')
    return (
        f"ck_ds_hosts=({hosts})",
        'for ck_ds_host in "${ck_ds_hosts[@]}"; do',
        f"  ck_why={why}",
        '  grep -qxF -- "$ck_ds_host" <<< "$ck_allocation" || ck_fail 2 "$ck_why" "error: $ck_why"',
        "done",
    )


def batch_sizes(s: Settings, dp: int) -> tuple[int, int, int]:
    """(train_batch_size, micro, accum), checking the identity DeepSpeed asserts at start-up."""
    expected = s.micro_batch * s.grad_accum * dp
    if s.global_batch is not None and s.global_batch != expected:
        raise PlanError(
            f"deepspeed: global_batch {s.global_batch} != micro_batch {s.micro_batch} x grad_accum {s.grad_accum} "
            f"x data parallel {dp} = {expected}; change one of them")
    return expected, s.micro_batch, s.grad_accum


def ds_config(s: Settings, dp: int) -> dict[str, object]:
    if s.offload == "optimizer+params" and s.zero_stage != 3:
        raise PlanError(f"deepspeed: offload=optimizer+params needs zero_stage=3 (got {s.zero_stage})")
    if s.offload != "none" and s.zero_stage == 0:
        raise PlanError("deepspeed: CPU offload needs ZeRO (zero_stage 1, 2 or 3)")
    train, micro, accum = batch_sizes(s, dp)
    zero: dict[str, object] = {"stage": s.zero_stage}
    if s.zero_stage >= 1:
        zero.update({"overlap_comm": True, "contiguous_gradients": True})
    if s.offload in ("optimizer", "optimizer+params"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if s.offload == "optimizer+params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if s.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    cfg: dict[str, object] = {
        "train_batch_size": train,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
        "steps_per_print": 100,
        "wall_clock_breakdown": False,
    }
    if s.precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif s.precision == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
                       "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1}
    return cfg


_CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed-config", "--deepspeed")


@dataclass(frozen=True)
class UserConfig:
    """The DeepSpeed config a user's own command names (``--deepspeed PATH``, ``--deepspeed_config PATH``)."""

    flag: str
    path: str


def user_config(args: Sequence[str]) -> UserConfig | None:
    """The user's config flag, ``=`` forms included.  A bare ``--deepspeed`` (DeepSpeed's own
    flag, followed by an option or nothing) names no file; ``--deepspeed PATH`` is transformers'."""
    for i, arg in enumerate(args):
        for flag in _CONFIG_FLAGS:
            if arg.startswith(flag + "="):
                return UserConfig(flag, arg[len(flag) + 1:])
            if arg == flag and i + 1 < len(args) and not args[i + 1].startswith("-"):
                return UserConfig(flag, args[i + 1])
    return None


def _batch_value(cfg: Mapping[str, object], key: str, where: str) -> int | None:
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{where}: {key} {value!r} is not a positive integer")
    return value


def check_user_batch(cfg: Mapping[str, object], dp: int, where: str) -> str:
    """DeepSpeed's batch derivation and assertion (runtime/config.py), on the user's file."""
    keys = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
    if any(cfg.get(k) == "auto" for k in keys):
        return "batch sizes 'auto': the Hugging Face Trainer fills them in from its own arguments"
    train, micro, accum = (_batch_value(cfg, k, where) for k in keys)
    if train is None:
        if micro is None:
            raise PlanError(f"{where}: sets neither train_batch_size nor train_micro_batch_size_per_gpu; "
                            "DeepSpeed needs one")
        accum = accum or 1
        return f"train_batch_size {micro * accum * dp} = micro {micro} x accum {accum} x dp {dp} (from {where})"
    if micro is None:
        accum = accum or 1
        micro = train // dp // accum
    elif accum is None:
        accum = train // micro // dp
    if micro * accum * dp != train:
        raise PlanError(f"{where}: train_batch_size {train} != micro {micro} x accum {accum} x data parallel {dp}; "
                        "DeepSpeed asserts this at start-up")
    return f"train_batch_size {train} = micro {micro} x accum {accum} x dp {dp} (from {where})"


def _read_user_config(uc: UserConfig, ctx: Context) -> tuple[str, dict[str, object] | None]:
    """(absolute path, parsed config); None when the pipeline did not read it (draft plans)."""
    got = ctx.inputs.get(uc.path)
    if got is None:
        return uc.path, None
    path, text = got
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"deepspeed: {uc.flag} {uc.path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(cfg, dict):
        raise PlanError(f"deepspeed: {uc.flag} {uc.path}: a DeepSpeed config is a JSON object")
    return path, cfg


def _config_args(ctx: Context, path: str, user: UserConfig | None) -> tuple[str, ...]:
    """What the script gets told about the config: nothing if it named one itself."""
    if user is not None or ctx.settings.ds_args == "none":
        return ()
    if ctx.settings.ds_args == "hf":
        if "--deepspeed" in ctx.command:
            raise PlanError("deepspeed: ds_args=hf adds --deepspeed PATH, but the command already has a bare "
                            "--deepspeed flag (DeepSpeed's own); use ds_args=deepspeed")
        return ("--deepspeed", path)
    # --deepspeed_config is what scripts built on deepspeed.add_config_arguments read; DeepSpeed's
    # bare --deepspeed flag changes nothing and clashes with transformers' --deepspeed PATH.
    return ("--deepspeed_config", path)


def _words(ctx: Context, f: Filter | None) -> tuple[list[Word], Mode]:
    s = ctx.settings
    words: list[Word] = ["deepspeed"]
    if not ctx.multi:
        if f is None:
            words += ["--num_gpus", str(ctx.gpus_per_node)]   # DeepSpeed refuses it with --include/--exclude
        # --master_port: the default, 29500, collides between two jobs on one node
        words += ["--master_port", Sh('"$CK_PORT"')]
        return words, "per_node"
    words += ["--hostfile", Sh('"$CK_HOSTFILE"')]
    if s.ds_launcher == "no_ssh" or not ctx.slurm:
        words += ["--no_ssh", "--node_rank", Sh('"$SLURM_NODEID"'), "--master_addr", Sh('"$CK_HEAD"'),
                  "--master_port", Sh('"$CK_PORT"')]
        return words, "per_node"
    if ctx.container:
        raise PlanError("deepspeed ds_launcher=pdsh cannot start inside the site's container; "
                        "use ds_launcher=no_ssh (default) or --set container=false")
    words += ["--launcher", "pdsh", "--master_addr", Sh('"$CK_HEAD"'), "--master_port", Sh('"$CK_PORT"')]
    return words, "once"


def build(ctx: Context) -> Launch:
    s = ctx.settings
    py = split_python(ctx.command, "deepspeed")
    if s.include and s.exclude_slots:
        raise PlanError("deepspeed: include and exclude_slots are mutually exclusive")
    f = None
    if s.include:
        f = check_filter(s.include, ctx, "include")
    elif s.exclude_slots:
        f = check_filter(s.exclude_slots, ctx, "exclude_slots")
    words, mode = _words(ctx, f)
    no_ssh = ctx.multi and mode == "per_node"
    world = filtered_world(f, ctx, no_ssh) if f else ctx.world_size
    if f:
        words += [f.flag, f.text]
    if not py.is_python:
        words.append("--no_python")
    elif py.module:
        words.append("--module")
    user = user_config(py.args)
    files: dict[str, str] = {}
    notes: tuple[str, ...]
    chosen: given.Given = {}
    if user is not None:
        path, cfg = _read_user_config(user, ctx)
        notes = (f"DeepSpeed config: the command's own {user.flag} {user.path}; clusterkit adds none",
                 check_user_batch(cfg, world, f"{user.flag} {user.path}") if cfg is not None else "config not read")
        chosen = {**(given.from_ds_config(cfg, user.path) if cfg is not None else {}), **given.from_command(py.args)}
    else:
        path = f"{ctx.run_dir}/ds_config.json"
        cfg = ds_config(s, world)
        files["ds_config.json"] = json.dumps(cfg, indent=2) + "\n"
        notes = (f"train_batch_size {cfg['train_batch_size']} = micro {s.micro_batch} x accum {s.grad_accum} "
                 f"x dp {world}", f"ZeRO stage {s.zero_stage}, offload {s.offload}, {s.precision}")
    if f:
        notes += (f"{f.flag} {f.text}: {world} of {ctx.world_size} slots",)
    env = (EnvVar("CK_DS_CONFIG", path, "launcher", "the DeepSpeed config this job uses, for scripts that "
                  "take it from the environment"),)
    args = tuple(py.args) + _config_args(ctx, path, user)
    if mode == "once":
        for arg in args:
            check_pdsh_safe(arg, "training argument")
    setup = allocation_check(f) if f and ctx.slurm and ctx.multi else ()
    templated: dict[str, str] = {}
    if mode == "once":
        # pdsh starts clean shells on the other nodes: the runner carries the env in .deepspeed_env
        setup += pdsh_env_setup()
        templated[".deepspeed_env"] = "deepspeed_env.j2"
    return Launch("deepspeed", mode, tuple(words), args, dialect=SLOTS if ctx.multi else None,
                  files=files, env=env, notes=notes, world_size=world if f else None, setup=setup,
                  templated=templated, term=_TERM if ctx.slurm else "default",
                  label="deepspeed ds_launcher=pdsh" if mode == "once" else "",
                  check_env=check_pdsh_env if mode == "once" else None, given=chosen)


# `scancel --signal=TERM` reaches every process of the step.  The `deepspeed` runner has no TERM
# handler and would die at once, ending the task while its workers still save (and a step whose
# task ended is killed).  Ignored, it waits for deepspeed.launcher.launch, which installs its own
# handler (TERM to the workers, SIGKILL after 30 s); the workers start with the default TERM
# action, so the training script's handler runs.
_TERM: Literal["ignore"] = "ignore"


def inputs(command: Sequence[str], launcher_args: Sequence[str] = ()) -> tuple[Input, ...]:
    """The user's own DeepSpeed config, whose batch sizes must match the world before the job is queued."""
    user = user_config(command)
    return (Input(user.path, f"deepspeed: {user.flag} {user.path}", "DeepSpeed config"),) if user else ()
