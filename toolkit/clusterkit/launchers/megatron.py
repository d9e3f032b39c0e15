"""Megatron-LM: torchrun per node plus tensor/pipeline/context parallel sizes checked against the world.

``tensor * pipeline * context * data == world size``; with tensor or context parallelism Megatron
needs ``CUDA_DEVICE_MAX_CONNECTIONS=1`` so its communication kernels are scheduled in issue order
and overlap with compute as it expects.
"""

from __future__ import annotations

from clusterkit.errors import PlanError
from clusterkit.launchers import Context, Launch, split_python
from clusterkit.launchers.torchrun import torchrun_words
from clusterkit.nccl import EnvVar

_FLAGS = {"tp": "--tensor-model-parallel-size", "pp": "--pipeline-model-parallel-size",
          "cp": "--context-parallel-size"}


def _sizes_from_args(args: tuple[str, ...], defaults: dict[str, int]) -> tuple[dict[str, int], set[str]]:
    """Parallel sizes already in the user's Megatron args win over --set values."""
    sizes, given = dict(defaults), set()
    for key, flag in _FLAGS.items():
        for i, a in enumerate(args):
            value = a.split("=", 1)[1] if a.startswith(flag + "=") else (
                args[i + 1] if a == flag and i + 1 < len(args) else None)
            if value is not None:
                if not value.isdigit() or int(value) < 1:
                    raise PlanError(f"megatron: {flag} {value!r} is not a positive integer")
                sizes[key] = int(value)
                given.add(key)
    return sizes, given


def build(ctx: Context) -> Launch:
    py = split_python(ctx.command, "megatron")
    s = ctx.settings
    sizes, given = _sizes_from_args(py.args, {"tp": s.tp, "pp": s.pp, "cp": s.cp})
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
    if s.global_batch is not None and s.global_batch % (s.micro_batch * dp):
        raise PlanError(f"megatron: global batch {s.global_batch} is not a multiple of micro batch {s.micro_batch} "
                        f"x data parallel {dp}")
    args = list(py.args)
    for key, flag in _FLAGS.items():
        if key not in given and (sizes[key] > 1 or key != "cp"):
            args += [flag, str(sizes[key])]
    env: tuple[EnvVar, ...] = ()
    if sizes["tp"] > 1 or sizes["cp"] > 1:
        env = (EnvVar("CUDA_DEVICE_MAX_CONNECTIONS", "1", "launcher",
                      "Megatron TP/CP: one hardware queue keeps comm kernels in issue order so they overlap compute"),)
    notes = (f"tensor {sizes['tp']} x pipeline {sizes['pp']} x context {sizes['cp']} x data {dp} = world {world}",)
    return Launch("megatron", "per_node", tuple(torchrun_words(ctx, py)), tuple(args), env=env, notes=notes)
