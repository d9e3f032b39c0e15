"""Hugging Face Accelerate: ``accelerate launch --config_file accelerate.yaml`` once per node.

The config file holds the job's shape; ``--machine_rank`` is per node (``$SLURM_NODEID``, escaped
so each node expands its own) and ``--main_process_ip/--main_process_port`` point at the head.

A config of the user's own (``--launcher-arg=--config_file=my.yaml``) is used instead of the
generated one, like a DeepSpeed config the command names: read on the submit host before the
queue (:func:`inputs`; errors name ``file:line``) and rendered as a copy with the job's keys
(``num_machines``, ``num_processes``, ``machine_rank``; ``main_process_ip``/``_port`` left to the
command line), the rest as written, so a file written for one machine runs on the job's nodes;
the per-node flags above still follow it on the command line, where they win over the file.
A ``distributed_type: DEEPSPEED`` config (ZeRO-3 under ``deepspeed_config``) runs with
``--deepspeed_multinode_launcher standard``: one accelerate per node through srun, never pdsh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml

from clusterkit.errors import PlanError
from clusterkit.job.launchers import Context, Input, Launch, Sh, Word, for_script, given, split_python

_COUNTS = "--nodes and --gpus-per-node (or the stage)"
_RDZV = "clusterkit (the allocation's first host, on the job's port)"
#: accelerate launch flags clusterkit writes (``--launcher-arg`` refuses them), and what sets them
#: instead; ``--config_file`` is not among them: a config of the user's own is read and checked.
OWNED_ARGS = {
    "--num_machines": _COUNTS, "--num_processes": _COUNTS,
    "--machine_rank": "clusterkit (each node's from the allocation)",
    "--main_process_ip": _RDZV, "--main_process_port": _RDZV, "--rdzv_backend": _RDZV, "--same_network": _RDZV,
    "--deepspeed_multinode_launcher": "clusterkit (standard: one accelerate per node through srun)",
    "--deepspeed_hostfile": "clusterkit (one accelerate per node through srun)",
    "--no_python": "the command after '--' (python or not)", "--module": "the command after '--' (python -m)",
    "-m": "the command after '--' (python -m)",
}


def _check_offload(ctx: Context) -> None:
    s = ctx.settings
    if "offload" not in s.model_fields_set or s.offload == "none":
        return
    if s.strategy != "fsdp":
        raise PlanError(f"accelerate: offload={s.offload} needs strategy=fsdp (DDP keeps everything on the GPU)")
    if s.offload != "optimizer+params":
        # FSDP's CPUOffload moves parameters, gradients and the optimizer step together
        raise PlanError("accelerate: FSDP offloads parameters and optimizer together (fsdp_offload_params); "
                        "use offload=optimizer+params")


def config(ctx: Context) -> dict[str, object]:
    s = ctx.settings
    _check_offload(ctx)
    if s.strategy == "fsdp":
        dist = "FSDP"
    elif ctx.world_size == 1:
        dist = "NO"
    else:
        dist = "MULTI_GPU"
    cfg: dict[str, object] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": dist,
        "mixed_precision": "no" if s.precision == "fp32" else s.precision,
        "num_machines": ctx.nnodes,
        "num_processes": ctx.world_size,
        "machine_rank": 0,          # replaced per node by --machine_rank
        "rdzv_backend": "static",
        "same_network": True,
        "main_training_function": "main",
        "gpu_ids": "all",
        "use_cpu": False,
    }
    if dist == "FSDP":
        cfg["fsdp_config"] = {
            "fsdp_sharding_strategy": "FULL_SHARD",
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_offload_params": s.offload == "optimizer+params",
            "fsdp_use_orig_params": True,
        }
    return cfg


_CONFIG_FLAGS = ("--config_file", "--config-file")


@dataclass(frozen=True)
class UserConfig:
    """The user's own ``--config_file PATH`` among the launcher arguments, and the words it took."""

    path: str
    words: tuple[int, ...]      # indexes into the launcher arguments


def user_config(args: Sequence[str]) -> UserConfig | None:
    for i, arg in enumerate(args):
        for flag in _CONFIG_FLAGS:
            if arg.startswith(flag + "="):
                return UserConfig(arg[len(flag) + 1:], (i,))
            if arg == flag:
                if i + 1 >= len(args):
                    raise PlanError(f"accelerate: {flag} needs a path after it")
                return UserConfig(args[i + 1], (i, i + 1))
    return None


def inputs(command: Sequence[str], launcher_args: Sequence[str] = ()) -> tuple[Input, ...]:
    """The user's own accelerate config, whose machine and process counts must match the plan."""
    user = user_config(launcher_args)
    return (Input(user.path, f"accelerate: --config_file {user.path}", "accelerate config"),) if user else ()


def extra_args(ctx: Context) -> tuple[str, ...]:
    """The launcher arguments after clusterkit's own words: all but the user's --config_file,
    which takes the generated config's place."""
    user = user_config(ctx.launcher_args)
    taken = set(user.words) if user else set()
    return tuple(a for i, a in enumerate(ctx.launcher_args) if i not in taken)


def _line(text: str, key: str) -> int | None:
    """The line of top-level ``key`` in a YAML mapping (for file:line errors)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    if isinstance(node, yaml.MappingNode):
        for k, _v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return int(k.start_mark.line) + 1
    return None


#: The keys of an accelerate config that are the job's, not the file's: clusterkit writes them into
#: the rendered copy (the counts and the rendezvous: a static one at the job's head, whose worker
#: restarts are the supervisor's relaunches, as in the config clusterkit writes itself) or leaves
#: them to the command line (per node, per job).  The same keys are refused in ``--launcher-arg``.
OWN_KEYS = ("num_machines", "num_processes", "machine_rank", "main_process_ip", "main_process_port",
            "rdzv_backend", "same_network")


def _copy(ctx: Context, cfg: Mapping[str, object], path: str) -> tuple[str, str]:
    """(the rendered copy of the user's config with the job's keys, a note saying what changed)."""
    mine: dict[str, object] = {"num_machines": ctx.nnodes, "num_processes": ctx.world_size, "machine_rank": 0,
                               "rdzv_backend": "static", "same_network": True}
    copy = {k: v for k, v in cfg.items() if k not in OWN_KEYS} | mine
    changed = [f"{k} {cfg[k]!r} -> {v}" for k, v in mine.items() if k in cfg and cfg[k] != v]
    changed += [f"{k} dropped" for k in ("main_process_ip", "main_process_port") if k in cfg]
    note = (f"accelerate config: a copy of the user's own {path} with the job's counts (num_machines "
            f"{ctx.nnodes}, num_processes {ctx.world_size}) and rendezvous (static at the job's head)"
            f"{': ' + ', '.join(changed) if changed else ''}; "
            "the rest as written; machine rank, main process address and port are set per node on the command line")
    return yaml.safe_dump(copy, sort_keys=False), note


def _check_user_config(ctx: Context, user: UserConfig
                       ) -> tuple[str, tuple[str, ...], bool, given.Given, str | None]:
    """(path to pass, notes, whether it is a DeepSpeed config, what it decides, the rendered copy
    of it with the job's keys; None where it was not read)."""
    got = ctx.inputs.get(user.path)
    if got is None:   # a draft plan: the pipeline did not read it
        return user.path, (f"accelerate config: the user's own {user.path} (not read)",), False, {}, None
    path, text = got
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        raise PlanError(f"accelerate: --config_file {where}: not valid YAML or JSON "
                        f"({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(cfg, Mapping):
        raise PlanError(f"accelerate: --config_file {path}: an accelerate config is a mapping of settings")

    def refuse(key: str, message: str) -> PlanError:
        line = _line(text, key)
        return PlanError(f"accelerate: --config_file {path}{f':{line}' if line else ''}: {key}: {message}")

    env = cfg.get("compute_environment", "LOCAL_MACHINE")
    if env != "LOCAL_MACHINE":
        raise refuse("compute_environment", f"{env!r}: clusterkit starts it on the allocation's nodes "
                     "(LOCAL_MACHINE)")
    for key in ("strategy", "offload", "precision"):
        if key in ctx.settings.model_fields_set:
            raise PlanError(f"accelerate: --set {key} writes clusterkit's own accelerate config, but the job uses "
                            f"its own --config_file {path}: set it there")
    dist = str(cfg.get("distributed_type", "NO"))
    copy, note = _copy(ctx, cfg, path)
    notes = [note]
    deepspeed = dist == "DEEPSPEED"
    if deepspeed:
        ds = cfg.get("deepspeed_config")
        stage = ds.get("zero_stage") if isinstance(ds, Mapping) else None
        notes.append(f"DeepSpeed through accelerate: ZeRO stage {stage if stage is not None else 'from its file'}, "
                     "--deepspeed_multinode_launcher standard (one accelerate per node through srun)")
    return f"{ctx.run_dir}/accelerate.yaml", tuple(notes), deepspeed, given.from_accelerate_config(cfg, user.path), copy


def build(ctx: Context) -> Launch:
    py = split_python(ctx.command, "accelerate")
    user = user_config(ctx.launcher_args)
    files: dict[str, str] = {}
    notes: tuple[str, ...] = ()
    deepspeed = False
    chosen: given.Given = {}
    if user is not None:
        path, notes, deepspeed, chosen, copy = _check_user_config(ctx, user)
        if copy is not None:
            files["accelerate.yaml"] = copy
    else:
        path = f"{ctx.run_dir}/accelerate.yaml"
        files["accelerate.yaml"] = yaml.safe_dump(config(ctx), sort_keys=True)
    words: list[Word] = ["accelerate", "launch", "--config_file", path,
                         "--num_machines", str(ctx.nnodes), "--num_processes", str(ctx.world_size)]
    if ctx.multi:
        words += ["--machine_rank", Sh('"$SLURM_NODEID"'), "--main_process_ip", Sh('"$CK_HEAD"')]
        if deepspeed:
            # accelerate's default for several machines runs `deepspeed` with pdsh from one node;
            # here every node runs its own accelerate (srun), which must start its local ranks
            words += ["--deepspeed_multinode_launcher", "standard"]
    words += ["--main_process_port", Sh('"$CK_PORT"')]   # the default, 29500, collides between jobs
    if not py.is_python:
        words.append("--no_python")
    elif py.module:
        words.append("--module")
    return Launch("accelerate", "per_node", tuple(words), py.args, files=files, notes=notes,
                  env=for_script(ctx, "accelerate", "micro_batch"), given={**chosen, **given.from_command(py.args)})
