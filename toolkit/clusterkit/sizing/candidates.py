"""Candidate setups: the ways to train (DDP, ZeRO, FSDP, Megatron, with offload), each evaluated
at a layout (nodes x GPUs, TP x PP) against the usable memory."""

from __future__ import annotations

import math
from dataclasses import dataclass

from clusterkit.sizing.model import (
    GIB,
    Shape,
    activation_bytes,
    ddp_model_states,
    megatron_model_states,
    zero1_model_states,
    zero2_model_states,
    zero3_model_states,
)
from clusterkit.vocab import stage_for_nodes

# --------------------------------------------------------------------------- candidate setups

# Which launchers can run a setup is what clusterkit's render configures for it: ZeRO stages and
# optimizer offload go into ds_config.json (deepspeed only); FSDP is torchrun's strategy=fsdp or
# accelerate's FSDP config (which can offload params); Megatron's TP x PP are megatron's flags.
ZERO_LAUNCHERS = frozenset({"deepspeed"})
FSDP_LAUNCHERS = frozenset({"torchrun", "accelerate"})


@dataclass(frozen=True)
class Method:
    """One way to train: framework, ZeRO stage, what is offloaded, and who can launch it."""

    key: str
    label: str
    launcher: str  # the launcher clusterkit renders for it by default
    launchers: frozenset[str]  # every launcher that can run it
    zero_stage: int | None = None
    offload: str = "none"
    # arguments the training command needs for the figure to hold (added when not there)
    command_args: tuple[str, ...] = ()


#: The candidates, in the order of the fallback ladder: least memory saving (fastest) first.
METHODS: tuple[Method, ...] = (
    Method("ddp", "DDP", "torchrun", frozenset({"torchrun", "accelerate", "horovod", "srun", "colossalai",
                                                                  "mpirun"})),
    Method("zero1", "ZeRO-1", "deepspeed", ZERO_LAUNCHERS, zero_stage=1),
    Method("zero2", "ZeRO-2", "deepspeed", ZERO_LAUNCHERS, zero_stage=2),
    Method("fsdp", "FSDP full shard", "torchrun", FSDP_LAUNCHERS | {"srun", "mpirun"}),
    Method("zero3", "ZeRO-3", "deepspeed", ZERO_LAUNCHERS, zero_stage=3),
    # the figure assumes ZeRO-1 over data parallel (4 + 16/d bytes per parameter); without the
    # distributed optimizer every GPU would hold 20 bytes per parameter
    Method("megatron", "Megatron TP x PP + ZeRO-1", "megatron", frozenset({"megatron"}), zero_stage=1,
           command_args=("--use-distributed-optimizer",)),
    Method("zero2-offload", "ZeRO-2 + CPU offload (optimizer)", "deepspeed", ZERO_LAUNCHERS, zero_stage=2,
           offload="optimizer"),
    Method("zero3-offload-opt", "ZeRO-3 + CPU offload (optimizer)", "deepspeed", ZERO_LAUNCHERS, zero_stage=3,
           offload="optimizer"),
    Method("zero3-offload-all", "ZeRO-3 + CPU offload (optimizer+params)", "deepspeed", ZERO_LAUNCHERS, zero_stage=3,
           offload="optimizer+params"),
    Method("fsdp-offload", "FSDP full shard + CPU offload", "accelerate", FSDP_LAUNCHERS, offload="optimizer+params"),
)
METHOD_BY_KEY = {m.key: m for m in METHODS}


@dataclass(frozen=True)
class Layout:
    """Nodes x GPUs per node, and for Megatron the tensor and pipeline sizes."""

    nodes: int
    gpus_per_node: int
    tp: int = 1
    pp: int = 1

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)

    @property
    def stage(self) -> str:
        """The clusterkit stage a node count implies (:data:`clusterkit.vocab.STAGES`)."""
        return stage_for_nodes(self.nodes)


@dataclass(frozen=True)
class Candidate:
    """One method evaluated at one layout: memory for model states and whether it fits."""

    method: Method
    layout: Layout
    gpu_bytes: int  # model states per GPU (DeepSpeed's figure)
    host_bytes: int  # per node
    fits_gpu: bool  # model states + activations within the usable GPU memory
    fits_host: bool
    act_bytes: int = 0  # activations per GPU, when a sequence length was given

    @property
    def fits(self) -> bool:
        return self.fits_gpu and self.fits_host

    @property
    def gpu_total(self) -> int:
        return self.gpu_bytes + self.act_bytes

    def describe_size(self) -> str:
        """``2 nodes x 8 GPUs (16 GPUs)``, plus ``TP 8 x PP 2 x DP 1`` for Megatron."""
        lay = self.layout
        text = f"{lay.nodes} node{'s' if lay.nodes > 1 else ''} x {lay.gpus_per_node} GPUs ({lay.gpus} GPUs)"
        if self.method.key == "megatron":
            text += f", TP {lay.tp} x PP {lay.pp} x DP {lay.dp}"
        return text

    def settings(self) -> dict[str, object]:
        """The job settings (``render --set key=value``) that select this setup."""
        m = self.method
        if m.key in ("ddp", "fsdp"):
            return {"strategy": m.key}
        if m.key == "fsdp-offload":
            return {"strategy": "fsdp", "offload": "optimizer+params"}
        if m.key == "megatron":
            return {"tp": self.layout.tp, "pp": self.layout.pp}
        return {"zero_stage": m.zero_stage, "offload": m.offload}

    def set_args(self) -> tuple[list[str], list[str]]:
        """This setup as ``render --set`` pairs its launcher takes, and the settings it leaves to
        the training script (torchrun does not offload: an FSDP script does it itself).  torchrun
        takes ``strategy`` and hands it to the script as ``$CK_STRATEGY``."""
        from clusterkit.job.settings import used_by

        taken: list[str] = []
        script: list[str] = []
        for key, value in self.settings().items():
            (taken if self.method.launcher in used_by(key) else script).append(f"{key}={value}")
        return taken, script

    def to_dict(self) -> dict[str, object]:
        """The JSON form (bytes exact, GiB rounded to 2 places for reading)."""
        m, lay = self.method, self.layout
        taken, script = self.set_args()
        return {
            "key": m.key, "label": m.label, "launcher": m.launcher, "settings": self.settings(),
            "set": taken, "script_chooses": script,
            "zero_stage": m.zero_stage,
            "offload": m.offload, "nodes": lay.nodes, "gpus_per_node": lay.gpus_per_node,
            "gpus": lay.gpus, "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "stage": lay.stage,
            "gpu_bytes": self.gpu_bytes, "host_bytes": self.host_bytes, "activation_bytes": self.act_bytes,
            "gpu_total_bytes": self.gpu_total,
            "gpu_gib": round(self.gpu_bytes / GIB, 2), "host_gib": round(self.host_bytes / GIB, 2),
            "activation_gib": round(self.act_bytes / GIB, 2),
            "fits_gpu": self.fits_gpu, "fits_host": self.fits_host, "fits": self.fits,
        }


# --------------------------------------------------------------------------- evaluation

@dataclass(frozen=True)
class Ctx:
    total_params: int
    largest_layer: int
    zero_init: bool
    buffer_factor: float
    usable_gpu: float  # bytes per GPU that model states (and activations) may use
    usable_host: float  # bytes per node
    shape: Shape | None = None


def _figures(method: Method, ctx: Ctx, lay: Layout) -> tuple[int, int]:
    """``(host_bytes_per_node, gpu_bytes_per_gpu)`` of ``method`` at ``lay``."""
    p, gpn, n, abf = ctx.total_params, lay.gpus_per_node, lay.nodes, ctx.buffer_factor
    key = method.key
    if key == "ddp":
        return ddp_model_states(p, gpn, abf)
    if key == "zero1":
        return zero1_model_states(p, gpn, n, abf)
    if key in ("zero2", "zero2-offload"):
        return zero2_model_states(p, gpn, n, cpu_offload=key == "zero2-offload", additional_buffer_factor=abf)
    if key == "megatron":
        return megatron_model_states(p, lay.tp, lay.pp, lay.dp, gpn, abf)
    # FSDP FULL_SHARD shards params, grads and optimizer states like ZeRO-3 (P_os+g+p in the ZeRO
    # paper): modelled with DeepSpeed's stage-3 figures, without offload, or, with CPUOffload
    # (params on the CPU, so gradients and the optimizer step are too), as offload optimizer+params.
    # zero_init stands for building the model on the meta device and materializing shards only.
    offload_all = key in ("zero3-offload-all", "fsdp-offload")
    offload_opt = offload_all or key == "zero3-offload-opt"
    cpu, gpu, _ = zero3_model_states(p, ctx.largest_layer, gpn, n, cpu_offload=offload_opt,
                                     cpu_offload_params=offload_all,
                                     zero_init=ctx.zero_init, additional_buffer_factor=abf)
    return cpu, gpu


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _candidate(method: Method, ctx: Ctx, lay: Layout) -> Candidate:
    host, gpu = _figures(method, ctx, lay)
    act = activation_bytes(ctx.shape, lay.tp, lay.pp) if ctx.shape else 0
    return Candidate(method, lay, gpu, host, gpu + act <= ctx.usable_gpu, host <= ctx.usable_host, act)


def evaluate(method: Method, ctx: Ctx, nodes: int, gpus_per_node: int) -> Candidate:
    """``method`` on ``nodes`` x ``gpus_per_node``.

    Megatron: tensor parallel over the GPUs of a node (TP traffic wants NVLink, so it never
    crosses nodes), pipeline parallel over the smallest divisor of the node count that fits
    (fewer stages, smaller pipeline bubble), the rest data parallel.  If no split fits, the one
    with the least memory (``pp = nodes``) is shown.
    """
    if method.key != "megatron":
        return _candidate(method, ctx, Layout(nodes, gpus_per_node))
    best: Candidate | None = None
    for pp in _divisors(nodes):
        best = _candidate(method, ctx, Layout(nodes, gpus_per_node, tp=gpus_per_node, pp=pp))
        if best.fits:
            break
    assert best is not None  # every n >= 1 has the divisor 1
    return best


def first_fit(method: Method, ctx: Ctx, gpus_per_node: int, lo: int, hi: int) -> Candidate | None:
    """The smallest node count in ``[lo, hi]`` at which ``method`` fits, or None.

    Binary search: memory per GPU and per node shrinks (or stays) as nodes are added for every
    method except ZeRO-2 with offload, whose host figure grows with the total GPU count (DeepSpeed's
    ``max(4 * total_gpus, 16)``), so it fits at ``lo`` or nowhere above it.
    """
    if method.key == "zero2-offload" or lo == hi:
        cand = evaluate(method, ctx, lo, gpus_per_node)
        return cand if cand.fits else None
    top = evaluate(method, ctx, hi, gpus_per_node)
    if not top.fits:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        cand = evaluate(method, ctx, mid, gpus_per_node)
        if cand.fits:
            hi, top = mid, cand
        else:
            lo = mid + 1
    return top


