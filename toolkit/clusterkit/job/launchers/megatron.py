"""Megatron-LM: torchrun per node plus tensor/pipeline/context parallel sizes checked against the world.

``tensor * pipeline * context * data == world size``; with tensor or context parallelism Megatron
needs ``CUDA_DEVICE_MAX_CONNECTIONS=1`` so its communication kernels are scheduled in issue order
and overlap with compute as it expects.
"""

from __future__ import annotations

from clusterkit.errors import PlanError
from clusterkit.job.launchers import Context, Launch, given, split_python
from clusterkit.job.launchers.torch_floor import floor_note
from clusterkit.job.launchers.torchrun import OWNED_ARGS as OWNED_ARGS
from clusterkit.job.launchers.torchrun import prefix_env, torchrun_words
from clusterkit.job.nccl import EnvVar

_FLAGS = {"tp": "--tensor-model-parallel-size", "pp": "--pipeline-model-parallel-size",
          "cp": "--context-parallel-size"}
_BATCH_FLAGS = {"micro": "--micro-batch-size", "global": "--global-batch-size"}
_PRECISION_FLAGS = {"bf16": "--bf16", "fp16": "--fp16"}


def _sizes_from_args(args: tuple[str, ...], defaults: dict[str, int],
                     flags: dict[str, str] = _FLAGS) -> tuple[dict[str, int], set[str]]:
    """Sizes already in the user's Megatron args win over --set values."""
    sizes, given = dict(defaults), set()
    for key, flag in flags.items():
        for i, a in enumerate(args):
            value = a.split("=", 1)[1] if a.startswith(flag + "=") else (
                args[i + 1] if a == flag and i + 1 < len(args) else None)
            if value is not None:
                if not value.isdigit() or int(value) < 1:
                    raise PlanError(f"megatron: {flag} {value!r} is not a positive integer")
                sizes[key] = int(value)
                given.add(key)
    return sizes, given


def _batch_args(ctx: Context, user_args: tuple[str, ...], dp: int) -> list[str]:
    """``--micro-batch-size`` and ``--global-batch-size`` (user args win), checked like Megatron does:
    the global batch is a multiple of micro x data parallel (the quotient is gradient accumulation)."""
    s = ctx.settings
    wanted_global = s.global_batch
    if wanted_global is None and "grad_accum" in s.model_fields_set:
        wanted_global = s.micro_batch * s.grad_accum * dp
    elif wanted_global is not None and "grad_accum" in s.model_fields_set and (
            wanted_global != s.micro_batch * s.grad_accum * dp):
        raise PlanError(f"megatron: global_batch {wanted_global} != micro_batch {s.micro_batch} x grad_accum "
                        f"{s.grad_accum} x data parallel {dp}; set one of global_batch or grad_accum")
    micro = _sizes_from_args(user_args, {"micro": s.micro_batch}, {"micro": _BATCH_FLAGS["micro"]})[0]["micro"]
    defaults = {"micro": s.micro_batch, "global": wanted_global or micro * dp}
    sizes, given = _sizes_from_args(user_args, defaults, _BATCH_FLAGS)
    if sizes["global"] % (sizes["micro"] * dp):
        raise PlanError(f"megatron: global batch {sizes['global']} is not a multiple of micro batch {sizes['micro']} "
                        f"x data parallel {dp}")
    return [w for key, flag in _BATCH_FLAGS.items() if key not in given for w in (flag, str(sizes[key]))]


def build(ctx: Context) -> Launch:
    py = split_python(ctx.command, "megatron")
    s = ctx.settings
    sizes, set_by_args = _sizes_from_args(py.args, {"tp": s.tp, "pp": s.pp, "cp": s.cp})
    model_parallel = sizes["tp"] * sizes["pp"] * sizes["cp"]
    world = ctx.world_size
    if world % model_parallel:
        raise PlanError(
            f"megatron: tensor {sizes['tp']} x pipeline {sizes['pp']} x context {sizes['cp']} = {model_parallel} "
            f"does not divide the world size {world} ({ctx.nnodes} nodes x {ctx.gpus_per_node} GPUs)")
    dp = world // model_parallel
    if sizes["tp"] > ctx.gpus_per_node:
        raise PlanError(f"megatron: tensor parallel {sizes['tp']} spans nodes ({ctx.gpus_per_node} GPUs per node); "
                        "keep TP within a node's NVLink domain")
    args = list(py.args)
    for key, flag in _FLAGS.items():
        if key not in set_by_args and (sizes[key] > 1 or key != "cp"):
            args += [flag, str(sizes[key])]
    args += _batch_args(ctx, py.args, dp)
    batch, batch_by_args = _sizes_from_args(py.args, {"micro": s.micro_batch, "global": 0}, _BATCH_FLAGS)
    if "precision" in s.model_fields_set and s.precision in _PRECISION_FLAGS and not (
            set(_PRECISION_FLAGS.values()) & set(py.args)):
        args.append(_PRECISION_FLAGS[s.precision])
    env: tuple[EnvVar, ...] = ()
    if sizes["tp"] > 1 or sizes["cp"] > 1:
        env = (EnvVar("CUDA_DEVICE_MAX_CONNECTIONS", "1", "launcher",
                      "Megatron TP/CP: one hardware queue keeps comm kernels in issue order so they overlap compute"),)
    notes = (f"tensor {sizes['tp']} x pipeline {sizes['pp']} x context {sizes['cp']} x data {dp} = world {world}",)
    chosen = given.megatron(py.args, "precision" in s.model_fields_set, batch["micro"], batch["global"], dp,
                            batch_by_args)
    return Launch("megatron", "per_node", tuple(torchrun_words(ctx, py)), tuple(args), env=env + prefix_env(ctx),
                  notes=notes + floor_note(ctx), given=chosen)
