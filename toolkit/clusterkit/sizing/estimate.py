"""Memory for model states, and which parallel setup fits a site: the core of ``clusterkit plan``.

Pure: no I/O, no clock, no environment.  Everything is in bytes until it is shown.

Sources of the formulas (each function below quotes its own):

* DeepSpeed 0.19.8, ``deepspeed/runtime/zero/stage_1_and_2.py::estimate_zero2_model_states_mem_needs``
  and ``deepspeed/runtime/zero/stage3.py::estimate_zero3_model_states_mem_needs``.  Reproduced
  operation for operation (same float arithmetic, same ``int()`` truncations) so the figures match
  DeepSpeed's to the byte.  DeepSpeed's "per CPU" figure is per node (host memory of one node).
* The ZeRO paper (Rajbhandari et al. 2020, arXiv:1910.02054, section 3.1): mixed-precision Adam holds
  2 bytes of fp16 weights + 2 of fp16 gradients + 12 of fp32 optimizer state (master weights, momentum,
  variance) per parameter: the plain DDP figure, 16 bytes.
* Megatron-LM ``docs/.../distrib_optimizer.md``: the distributed optimizer (ZeRO-1 over data parallel)
  holds ``4 + 16/d`` bytes per parameter with fp16 params and fp16 grads (20 without it).

Activations are counted only when a sequence length is given (:func:`activation_bytes`, after
Korthikanti et al. 2022), since they depend on the architecture and micro-batch, not on the
parameter count; the headroom fraction leaves room for them (when not counted), CUDA context,
NCCL buffers and fragmentation.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Optional

from clusterkit.errors import UsageError
from clusterkit.vocab import LAUNCHERS, stage_for_nodes

GIB = 2**30
#: DeepSpeed's ``additional_buffer_factor`` default: slack on the host (CPU) figures only.
BUFFER_FACTOR = 1.5
#: Fraction of GPU and host memory kept free for activations, CUDA context, NCCL buffers, fragmentation.
DEFAULT_HEADROOM = 0.2

OFFLOADS: tuple[str, ...] = ("none", "optimizer", "optimizer+params")

#: Largest parameter count read: the float arithmetic of the memory model overflows long before 1e400.
MAX_PARAMS = 10**16
_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}
_SIZE_RE = re.compile(r"\s*([+-]?)\s*((?:\d[\d_]*)?(?:\.\d*)?(?:[eE][+-]?\d+)?)\s*([kKmMbBgGtT]?)\s*")


# --------------------------------------------------------------------------- sizes


def parse_size(text: str, what: str = "--model-params") -> int:
    """Parse a parameter count: ``7B``, ``70e9``, ``350M``, ``1.5T``, ``1_000_000`` or a plain int.

    Suffixes are decimal (K=1e3, M=1e6, B/G=1e9, T=1e12), as model sizes are quoted.  Raises
    :class:`UsageError` (one line naming ``what``) for zero, negative, fractional or unparseable input.
    """
    match = _SIZE_RE.fullmatch(text)
    number = match.group(2).replace("_", "") if match else ""
    if not match or not any(c.isdigit() for c in number):
        raise UsageError(f"{what}: cannot read {text!r} as a parameter count (examples: 7B, 70e9, 350M, 1.5T)")
    try:
        value = Decimal(number) * _SUFFIX[match.group(3).upper()]
    except InvalidOperation:  # pragma: no cover - the regex admits only decimal syntax
        raise UsageError(f"{what}: cannot read {text!r} as a parameter count") from None
    if match.group(1) == "-" and value != 0:
        raise UsageError(f"{what}: {text!r} is negative; a parameter count must be positive")
    if value == 0:
        raise UsageError(f"{what}: {text!r} is zero; a parameter count must be positive")
    if value > MAX_PARAMS:
        raise UsageError(f"{what}: {text!r} is more than {human_count(MAX_PARAMS)} parameters (the limit)")
    if value != value.to_integral_value():
        raise UsageError(f"{what}: {text!r} is not a whole number of parameters")
    return int(value)


def human_count(n: int) -> str:
    """``7000000000`` -> ``7B``; ``1500000000000`` -> ``1.5T`` (decimal units, 3 significant digits)."""
    for suffix, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return str(n)


def default_largest_layer(total_params: int) -> int:
    """A stand-in for the largest layer when the user gives none (ZeRO-3 needs it).

    Assumes a GPT-3-shaped transformer: ``P ~ 12 * L * h^2`` with ``h ~ 128 * L`` (GPT-3 6.7B:
    h=4096, L=32; 175B: h=12288, L=96), so ``h ~ (128 * P / 12) ** (1/3)``.  The largest layer is
    then the larger of the MLP up-projection (``4h * h``) and a token embedding with GPT-2/3's
    50257-token vocabulary (``50257 * h``).  Real models differ (BLOOM's 250k vocabulary makes its
    embedding 3.6B); ``--largest-layer-params`` gives the true figure.
    """
    hidden = gpt3_hidden(total_params)
    return min(total_params, max(4 * hidden * hidden, DEFAULT_VOCAB * hidden))


# --------------------------------------------------------------------------- DeepSpeed's estimators


def zero2_model_states(
    total_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    additional_buffer_factor: float = BUFFER_FACTOR,
) -> tuple[int, int]:
    """``(cpu_bytes_per_node, gpu_bytes_per_gpu)`` exactly as DeepSpeed 0.19.8 estimates ZeRO-2.

    Source: ``deepspeed/runtime/zero/stage_1_and_2.py::estimate_zero2_model_states_mem_needs``::

        total_gpus = num_nodes * num_gpus_per_node
        if cpu_offload:
            gpu_mem = 2 * total_params
            cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
        else:
            # 2 = params_16bit, 18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit
            #                       + 8_optimizer_states_32bit(momentum and variance)
            gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
            cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
        return int(cpu_mem), int(gpu_mem)

    Note DeepSpeed's offload CPU figure scales with the *total* GPU count, not GPUs per node.
    """
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = 2 * total_params
        cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def zero3_model_states(
    total_params: int,
    largest_layer_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    cpu_offload_params: bool = True,
    zero_init: bool = True,
    additional_buffer_factor: float = BUFFER_FACTOR,
) -> tuple[int, int, int]:
    """``(cpu_bytes_per_node, gpu_bytes_per_gpu, largest_layer_bytes)`` exactly as DeepSpeed 0.19.8.

    Source: ``deepspeed/runtime/zero/stage3.py::estimate_zero3_model_states_mem_needs``::

        total_gpus = num_nodes * num_gpus_per_node
        gpus_factor = 1 / num_nodes
        largest_layer_memory = (4 * largest_layer_params)
        if cpu_offload:
            if cpu_offload_params:
                gpu_mem = largest_layer_memory
                cpu_mem = total_params * 18 * gpus_factor * abf                        # zero_init
                cpu_mem = total_params * max(4 * num_gpus_per_node, 18 * gpus_factor) * abf  # not
            else:
                gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
                cpu_mem = total_params * 16 * gpus_factor * abf                        # zero_init
                cpu_mem = total_params * max(4 * num_gpus_per_node, 16 * gpus_factor) * abf  # not
        else:
            gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * abf               # zero_init
            cpu_mem = total_params * 4 * num_gpus_per_node * abf                       # not
        return int(cpu_mem), int(gpu_mem), largest_layer_memory

    (``abf`` is ``additional_buffer_factor``.)  ``cpu_offload`` is ``offload_optimizer: cpu``,
    ``cpu_offload_params`` is ``offload_param: cpu``; DeepSpeed never offloads params alone.
    """
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = 4 * largest_layer_params
    abf = additional_buffer_factor
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            if zero_init:
                cpu_mem = total_params * 18 * gpus_factor * abf
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, 18 * gpus_factor) * abf
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            if zero_init:
                cpu_mem = total_params * 16 * gpus_factor * abf
            else:
                cpu_mem = total_params * max(4 * num_gpus_per_node, 16 * gpus_factor) * abf
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        if zero_init:
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * abf
        else:
            cpu_mem = total_params * 4 * num_gpus_per_node * abf
    return int(cpu_mem), int(gpu_mem), largest_layer_memory


# --------------------------------------------------------------------------- the others


def ddp_model_states(
    total_params: int, num_gpus_per_node: int = 1, additional_buffer_factor: float = BUFFER_FACTOR
) -> tuple[int, int]:
    """``(cpu_bytes_per_node, gpu_bytes_per_gpu)`` for plain DDP with mixed-precision Adam.

    GPU: 16 bytes per parameter, replicated on every GPU (ZeRO paper, section 3.1: 2 fp16 weights +
    2 fp16 grads + 12 fp32 master weights, momentum and variance).
    Host: every rank first builds the fp32 model on the CPU, the same assumption as DeepSpeed's
    non-offload figure (``total_params * 4 * num_gpus_per_node * additional_buffer_factor``).
    """
    cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), 16 * total_params


def zero1_model_states(
    total_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    additional_buffer_factor: float = BUFFER_FACTOR,
) -> tuple[int, int]:
    """``(cpu_bytes_per_node, gpu_bytes_per_gpu)`` for ZeRO-1 (optimizer states sharded).

    DeepSpeed ships no stage-1 estimator, so this takes the byte accounting of its stage-2 one
    (``stage_1_and_2.py::estimate_zero2_model_states_mem_needs``: 2 fp16 params replicated, 18
    sharded = 2 fp16 grads + 4 fp32 grads + 4 fp32 params + 8 Adam) and moves the 2 bytes of fp16
    gradients back to the replicated side, since stage 1 shards optimizer states only::

        gpu = 4 * P + int(16 * P / total_gpus)

    This is also Megatron-LM's distributed-optimizer figure for fp16 params and grads (``4 + 16/d``
    bytes per parameter, docs ``distrib_optimizer.md``).  Host: as ZeRO-2 without offload.
    """
    total_gpus = num_nodes * num_gpus_per_node
    gpu_mem = 4 * total_params + int(16 * total_params / total_gpus)
    cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), gpu_mem


def megatron_model_states(
    total_params: int,
    tp: int,
    pp: int,
    dp: int,
    num_gpus_per_node: int,
    additional_buffer_factor: float = BUFFER_FACTOR,
) -> tuple[int, int]:
    """``(cpu_bytes_per_node, gpu_bytes_per_gpu)`` for Megatron TP x PP with ZeRO-1 over DP.

    Assumes the model splits evenly: each GPU holds ``p = ceil(P / (tp * pp))`` parameters (tensor
    parallel splits every layer, pipeline parallel splits the stack), and the distributed optimizer
    (``--use-distributed-optimizer``) shards their optimizer state over the ``dp`` replicas, at
    Megatron-LM's documented ``4 + 16/d`` bytes per parameter for fp16 params and grads::

        gpu = 4 * p + int(16 * p / dp)

    Host: each rank builds only its own fp32 shard: ``p * 4 * num_gpus_per_node * abf``.
    """
    per_gpu = -(-total_params // (tp * pp))
    gpu_mem = 4 * per_gpu + int(16 * per_gpu / dp)
    cpu_mem = per_gpu * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), gpu_mem


# --------------------------------------------------------------------------- activations (optional)

#: GPT-2/GPT-3 tokenizer size, the default vocabulary when none is given.
DEFAULT_VOCAB = 50257


@dataclass(frozen=True)
class Shape:
    """What activation memory needs beyond the parameter count."""

    seq_len: int
    micro_batch: int
    hidden: int
    layers: int
    vocab: int
    assumed: tuple[str, ...] = ()  # which of hidden/layers/vocab were guessed


def gpt3_hidden(total_params: int) -> int:
    """Hidden size of a GPT-3-shaped model: ``P ~ 12 L h^2`` and ``h ~ 128 L`` give ``(128 P / 12) ** (1/3)``."""
    return max(1, round(float((128 * total_params / 12) ** (1 / 3))))


def make_shape(total_params: int, seq_len: int, micro_batch: int = 1, hidden: Optional[int] = None,
               layers: Optional[int] = None, vocab: Optional[int] = None) -> Shape:
    """Fill in what the user did not give from ``P ~ 12 * layers * hidden^2`` (GPT-3 shape)."""
    assumed = []
    if hidden is None:
        hidden = gpt3_hidden(total_params) if layers is None else max(1, round(math.sqrt(total_params / (12 * layers))))
        assumed.append("hidden")
    if layers is None:
        layers = max(1, round(total_params / (12 * hidden * hidden)))
        assumed.append("layers")
    if vocab is None:
        vocab = DEFAULT_VOCAB
        assumed.append("vocab")
    return Shape(seq_len, micro_batch, hidden, layers, vocab, tuple(assumed))


def activation_bytes(shape: Shape, tp: int = 1, pp: int = 1) -> int:
    """Peak activation memory per GPU, with full activation recomputation and FlashAttention.

    Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
    (arXiv:2205.05198): one transformer layer stores ``s*b*h*(34 + 5*a*s/h)`` bytes (16-bit).
    FlashAttention stores no ``s x s`` scores, leaving ``34*s*b*h``; full recomputation keeps only
    each layer's ``2*s*b*h`` input and rebuilds one layer at a time in backward; the output layer
    adds ``4*s*b*h*(1 + v/h)`` (final layernorm, projection, fp32 logits for the loss).  Tensor +
    sequence parallel divide it all by ``t``.  With 1F1B pipelining the first stage keeps ``pp``
    micro-batches of ``L/pp`` layers, i.e. all ``L`` layers' inputs; the last stage has the output
    layer.  The peak is the larger of the two::

        first = 2*s*b*h*L + 34*s*b*h                 (+ output layer when pp == 1)
        last  = 2*s*b*h*ceil(L/pp) + 34*s*b*h + 4*s*b*h + 4*s*b*v
        per GPU = ceil(max(first, last) / tp)
    """
    sbh = shape.seq_len * shape.micro_batch * shape.hidden
    output = 4 * sbh + 4 * shape.seq_len * shape.micro_batch * shape.vocab
    first = 2 * sbh * shape.layers + 34 * sbh + (output if pp == 1 else 0)
    last = 2 * sbh * -(-shape.layers // pp) + 34 * sbh + output
    return -(-max(first, last) // tp)


# --------------------------------------------------------------------------- candidate setups

# Which launchers can run a setup is what clusterkit's render configures for it: ZeRO stages and
# optimizer offload go into ds_config.json (deepspeed only); FSDP is torchrun's strategy=fsdp or
# accelerate's FSDP config (which can offload params); Megatron's TP x PP are megatron's flags.
_ZERO = frozenset({"deepspeed"})
_FSDP = frozenset({"torchrun", "accelerate"})


@dataclass(frozen=True)
class Method:
    """One way to train: framework, ZeRO stage, what is offloaded, and who can launch it."""

    key: str
    label: str
    launcher: str  # the launcher clusterkit renders for it by default
    launchers: frozenset[str]  # every launcher that can run it
    zero_stage: Optional[int] = None
    offload: str = "none"


#: The candidates, in the order of the fallback ladder: least memory saving (fastest) first.
METHODS: tuple[Method, ...] = (
    Method("ddp", "DDP", "torchrun", frozenset({"torchrun", "accelerate", "horovod", "srun", "colossalai"})),
    Method("zero1", "ZeRO-1", "deepspeed", _ZERO, zero_stage=1),
    Method("zero2", "ZeRO-2", "deepspeed", _ZERO, zero_stage=2),
    Method("fsdp", "FSDP full shard", "torchrun", _FSDP | {"srun"}),
    Method("zero3", "ZeRO-3", "deepspeed", _ZERO, zero_stage=3),
    Method("megatron", "Megatron TP x PP + ZeRO-1", "megatron", frozenset({"megatron"}), zero_stage=1),
    Method("zero2-offload", "ZeRO-2 + CPU offload (optimizer)", "deepspeed", _ZERO, zero_stage=2, offload="optimizer"),
    Method("zero3-offload-opt", "ZeRO-3 + CPU offload (optimizer)", "deepspeed", _ZERO, zero_stage=3,
           offload="optimizer"),
    Method("zero3-offload-all", "ZeRO-3 + CPU offload (optimizer+params)", "deepspeed", _ZERO, zero_stage=3,
           offload="optimizer+params"),
    Method("fsdp-offload", "FSDP full shard + CPU offload", "accelerate", _FSDP, offload="optimizer+params"),
)
METHOD_BY_KEY = {m.key: m for m in METHODS}


@dataclass(frozen=True)
class Hardware:
    """What the estimate needs from a site, as plain numbers (``site.nodes``, ``site.cost``).

    Memory sizes are GiB (2**30 bytes), the unit DeepSpeed's estimators print as "GB".
    """

    gpus_per_node: int
    gpu_mem_gib: float
    host_mem_gib: float
    max_nodes: int
    gpu_hour_price: Optional[float] = None
    currency: str = "USD"


@dataclass(frozen=True)
class PlanInput:
    """What the user asked: the model, and optionally the size, launcher and offload to use."""

    total_params: int
    largest_layer_params: Optional[int] = None
    gpus: Optional[int] = None
    nodes: Optional[int] = None
    launcher: Optional[str] = None
    offload: Optional[str] = None
    zero_init: bool = True
    headroom: float = DEFAULT_HEADROOM
    buffer_factor: float = BUFFER_FACTOR
    hours: Optional[float] = None
    shape: Optional[Shape] = None  # given (with a sequence length): activations count too


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

    def to_dict(self) -> dict[str, object]:
        """The JSON form (bytes exact, GiB rounded to 2 places for reading)."""
        m, lay = self.method, self.layout
        return {
            "key": m.key, "label": m.label, "launcher": m.launcher, "settings": self.settings(),
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

#: How far the "how many GPUs would it take" search looks (nodes).
_SEARCH_LIMIT_NODES = 1_000_000


@dataclass(frozen=True)
class _Ctx:
    total_params: int
    largest_layer: int
    zero_init: bool
    buffer_factor: float
    usable_gpu: float  # bytes per GPU that model states (and activations) may use
    usable_host: float  # bytes per node
    shape: Optional[Shape] = None


def _figures(method: Method, ctx: _Ctx, lay: Layout) -> tuple[int, int]:
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


def _candidate(method: Method, ctx: _Ctx, lay: Layout) -> Candidate:
    host, gpu = _figures(method, ctx, lay)
    act = activation_bytes(ctx.shape, lay.tp, lay.pp) if ctx.shape else 0
    return Candidate(method, lay, gpu, host, gpu + act <= ctx.usable_gpu, host <= ctx.usable_host, act)


def evaluate(method: Method, ctx: _Ctx, nodes: int, gpus_per_node: int) -> Candidate:
    """``method`` on ``nodes`` x ``gpus_per_node``.

    Megatron: tensor parallel over the GPUs of a node (TP traffic wants NVLink, so it never
    crosses nodes), pipeline parallel over the smallest divisor of the node count that fits
    (fewer stages, smaller pipeline bubble), the rest data parallel.  If no split fits, the one
    with the least memory (``pp = nodes``) is shown.
    """
    if method.key != "megatron":
        return _candidate(method, ctx, Layout(nodes, gpus_per_node))
    best: Optional[Candidate] = None
    for pp in _divisors(nodes):
        best = _candidate(method, ctx, Layout(nodes, gpus_per_node, tp=gpus_per_node, pp=pp))
        if best.fits:
            break
    assert best is not None  # every n >= 1 has the divisor 1
    return best


def first_fit(method: Method, ctx: _Ctx, gpus_per_node: int, lo: int, hi: int) -> Optional[Candidate]:
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


# --------------------------------------------------------------------------- recommendation


def rule_of_thumb(total_params: int, launcher: Optional[str] = None) -> tuple[list[str], str]:
    """The usual choice by model size: method keys in order of preference, and the rule in words.

    Under 1B: DDP; 1B-10B: FSDP or ZeRO-3 (ZeRO-3 first when DeepSpeed launches); 10B-100B:
    ZeRO-2/3 across nodes; over 100B: Megatron tensor + pipeline parallel with ZeRO.
    """
    if total_params < 10**9:
        return ["ddp"], "under 1B parameters: DDP"
    if total_params < 10**10:
        keys = ["zero3", "fsdp"] if launcher in _ZERO else ["fsdp", "zero3"]
        return keys, "1B-10B parameters: FSDP or ZeRO-3"
    if total_params <= 10**11:
        return ["zero2", "zero3"], "10B-100B parameters: ZeRO-2/3 across nodes"
    return ["megatron"], "over 100B parameters: Megatron tensor + pipeline parallel with ZeRO"


def preference(rule_keys: list[str], available: list[str]) -> list[str]:
    """Rule's choices first, then the ladder onwards (more memory saving), then the rest of it."""
    ladder = [m.key for m in METHODS]
    last = max(ladder.index(k) for k in rule_keys)
    order = rule_keys + ladder[last + 1:] + ladder[:last + 1]
    seen: list[str] = []
    for key in order:
        if key in available and key not in seen:
            seen.append(key)
    return seen


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _why_not(c: Candidate, ctx: _Ctx, auto: bool, max_nodes: int) -> str:
    where = f"on up to {max_nodes} node{'s' if max_nodes > 1 else ''}" if auto else f"on {c.describe_size()}"
    if not c.fits_gpu:
        return f"{c.method.label} does not fit {where}: {_gib(c.gpu_total)}{_split(c)} per GPU > {_gib(ctx.usable_gpu)} usable"
    return f"{c.method.label} does not fit {where}: {_gib(c.host_bytes)} host memory per node > {_gib(ctx.usable_host)} usable"


def _split(c: Candidate) -> str:
    return f" ({_gib(c.gpu_bytes)} model states + {_gib(c.act_bytes)} activations)" if c.act_bytes else ""


def _fits_text(c: Candidate, ctx: _Ctx) -> str:
    return (f"{c.method.label} fits on {c.describe_size()}: {_gib(c.gpu_total)}{_split(c)} of {_gib(ctx.usable_gpu)} usable "
            f"per GPU, {_gib(c.host_bytes)} of {_gib(ctx.usable_host)} usable host memory per node")


@dataclass(frozen=True)
class PlanEstimate:
    """The answer: every candidate, the recommended one and why, and what it would cost."""

    hardware: Hardware
    request: PlanInput
    largest_layer_params: int
    largest_layer_assumed: bool
    usable_gpu_bytes: float
    usable_host_bytes: float
    candidates: tuple[Candidate, ...]
    recommended: Optional[Candidate]
    reason: str
    needed: Optional[Candidate] = None  # when nothing fits: the smallest setup that would
    gpu_hours: Optional[float] = None
    cost: Optional[float] = None

    def to_dict(self) -> dict[str, object]:
        """The JSON form of the estimate (what ``clusterkit plan --json`` prints)."""
        hw, req = self.hardware, self.request
        return {
            "model_params": req.total_params,
            "largest_layer_params": self.largest_layer_params,
            "largest_layer_assumed": self.largest_layer_assumed,
            "site": {"gpus_per_node": hw.gpus_per_node, "gpu_mem_gib": hw.gpu_mem_gib,
                     "host_mem_gib": hw.host_mem_gib, "nodes": hw.max_nodes},
            "headroom": req.headroom, "buffer_factor": req.buffer_factor, "zero_init": req.zero_init,
            "shape": None if req.shape is None else {
                "seq_len": req.shape.seq_len, "micro_batch": req.shape.micro_batch, "hidden": req.shape.hidden,
                "layers": req.shape.layers, "vocab": req.shape.vocab, "assumed": list(req.shape.assumed)},
            "usable_gpu_bytes": int(self.usable_gpu_bytes), "usable_host_bytes": int(self.usable_host_bytes),
            "requested": {"gpus": req.gpus, "nodes": req.nodes, "launcher": req.launcher, "offload": req.offload},
            "candidates": [c.to_dict() for c in self.candidates],
            "recommended": self.recommended.to_dict() if self.recommended else None,
            "reason": self.reason,
            "needed": self.needed.to_dict() if self.needed else None,
            "cost": None if self.gpu_hours is None else {
                "hours": req.hours, "gpu_hours": self.gpu_hours, "price_per_gpu_hour": hw.gpu_hour_price,
                "currency": hw.currency if hw.gpu_hour_price is not None else None, "total": self.cost},
        }


# --------------------------------------------------------------------------- the entry point


def _check(hw: Hardware, req: PlanInput) -> None:
    """Reject impossible requests with one line each (UsageError, exit 2)."""
    if req.largest_layer_params is not None and req.largest_layer_params > req.total_params:
        raise UsageError(f"--largest-layer-params {human_count(req.largest_layer_params)} is larger than "
                         f"--model-params {human_count(req.total_params)}")
    if req.gpus is not None and req.nodes is not None:
        raise UsageError("give --gpus or --nodes, not both")
    if req.gpus is not None:
        if req.gpus < 1:
            raise UsageError(f"--gpus {req.gpus}: must be at least 1")
        if req.gpus > hw.gpus_per_node and req.gpus % hw.gpus_per_node:
            raise UsageError(f"--gpus {req.gpus} is not a multiple of the site's {hw.gpus_per_node} GPUs per node")
    if req.nodes is not None and req.nodes < 1:
        raise UsageError(f"--nodes {req.nodes}: must be at least 1")
    nodes = req.nodes if req.nodes is not None else -(-(req.gpus or 0) // hw.gpus_per_node)
    if nodes > hw.max_nodes:
        raise UsageError(f"{nodes} nodes asked for, but the site has {hw.max_nodes}")
    if not 0 <= req.headroom < 1:
        raise UsageError(f"--headroom {req.headroom}: must be at least 0 and below 1")
    if req.buffer_factor <= 0:
        raise UsageError(f"--buffer-factor {req.buffer_factor}: must be positive")
    if req.hours is not None and req.hours <= 0:
        raise UsageError(f"--hours {req.hours}: must be positive")
    if req.shape is not None:
        sh = req.shape
        for name, value in (("--seq-len", sh.seq_len), ("--micro-batch", sh.micro_batch),
                            ("--hidden-size", sh.hidden), ("--layers", sh.layers), ("--vocab-size", sh.vocab)):
            if value < 1:
                raise UsageError(f"{name} {value}: must be at least 1")
    if req.launcher is not None and req.launcher not in LAUNCHERS:
        raise UsageError(f"--launcher {req.launcher!r}: choose one of {', '.join(LAUNCHERS)}")
    if req.offload is not None and req.offload not in OFFLOADS:
        raise UsageError(f"--offload {req.offload!r}: choose one of {', '.join(OFFLOADS)}")


def _available(req: PlanInput) -> list[Method]:
    # a launcher the user names is the one the setup will run under
    methods = [replace(m, launcher=req.launcher or m.launcher) for m in METHODS
               if (req.launcher is None or req.launcher in m.launchers)
               and (req.offload is None or m.offload == req.offload)]
    if not methods:
        raise UsageError(f"no setup runs under --launcher {req.launcher} with --offload {req.offload}")
    return methods


def _fixed_size(hw: Hardware, req: PlanInput) -> Optional[tuple[int, int]]:
    """``(nodes, gpus_per_node)`` when the user fixed the size; a count below one node stays on one."""
    if req.nodes is not None:
        return req.nodes, hw.gpus_per_node
    if req.gpus is not None:
        if req.gpus < hw.gpus_per_node:
            return 1, req.gpus
        return req.gpus // hw.gpus_per_node, hw.gpus_per_node
    return None


def _candidates(methods: list[Method], ctx: _Ctx, hw: Hardware, size: Optional[tuple[int, int]]) -> list[Candidate]:
    """Each method at the fixed size, or at the fewest nodes of the site where it fits."""
    out = []
    for m in methods:
        if size is not None:
            out.append(evaluate(m, ctx, size[0], size[1]))
            continue
        fit = first_fit(m, ctx, hw.gpus_per_node, 1, hw.max_nodes)
        out.append(fit or _closest(m, ctx, hw))
    return out


def _closest(method: Method, ctx: _Ctx, hw: Hardware) -> Candidate:
    """Where a method fits nowhere on the site, the size that comes closest.

    That is the whole site for most methods (memory per GPU shrinks with more GPUs), but one node
    where more nodes do not help (DDP) or make it worse (ZeRO-2 offload's host figure).
    """
    one = evaluate(method, ctx, 1, hw.gpus_per_node)
    full = evaluate(method, ctx, hw.max_nodes, hw.gpus_per_node)
    return min((one, full), key=lambda c: (not c.fits_gpu, c.gpu_total, not c.fits_host, c.layout.nodes))


def _recommend(cands: list[Candidate], ctx: _Ctx, hw: Hardware, req: PlanInput,
               auto: bool) -> tuple[Optional[Candidate], str]:
    rule_keys, rule_text = rule_of_thumb(ctx.total_params, req.launcher)
    by_key = {c.method.key: c for c in cands}
    head = f"{human_count(ctx.total_params)} parameters; rule of thumb: {rule_text}"
    missing = [METHOD_BY_KEY[k].label for k in rule_keys if k not in by_key]
    notes = []
    if missing:
        filters = " ".join(f for f in (req.launcher and f"--launcher {req.launcher}",
                                       req.offload and f"--offload {req.offload}") if f)
        notes.append(f"{' and '.join(missing)} not available with {filters}")
    for key in preference(rule_keys, list(by_key)):
        cand = by_key[key]
        if cand.fits:
            if key not in rule_keys:
                notes.append("next that fits: " + _fits_text(cand, ctx))
                return cand, f"{head}. " + "; ".join(notes) + "."
            return cand, f"{head}. {'; '.join(notes + [_fits_text(cand, ctx)])}."
        if key in rule_keys:
            notes.append(_why_not(cand, ctx, auto, hw.max_nodes))
    return None, f"{head}. " + "; ".join(notes) + ("; " if notes else "") + "nothing fits"


def _needed(methods: list[Method], ctx: _Ctx, hw: Hardware, gpus_per_node: int) -> Optional[Candidate]:
    """The setup with the fewest GPUs that would fit, at any node count (the site's size aside)."""
    fits = [first_fit(m, ctx, gpus_per_node, 1, _SEARCH_LIMIT_NODES) for m in methods]
    found = [c for c in fits if c is not None]
    return min(found, key=lambda c: (c.layout.gpus, [m.key for m in METHODS].index(c.method.key))) if found else None


def plan_estimate(hw: Hardware, req: PlanInput) -> PlanEstimate:
    """Evaluate every candidate setup for ``req`` on ``hw`` and recommend one (pure)."""
    _check(hw, req)
    assumed = req.largest_layer_params is None
    largest = default_largest_layer(req.total_params) if assumed else req.largest_layer_params
    assert largest is not None
    ctx = _Ctx(req.total_params, largest, req.zero_init, req.buffer_factor,
               hw.gpu_mem_gib * GIB * (1 - req.headroom), hw.host_mem_gib * GIB * (1 - req.headroom), req.shape)
    methods = _available(req)
    size = _fixed_size(hw, req)
    cands = _candidates(methods, ctx, hw, size)
    chosen, reason = _recommend(cands, ctx, hw, req, auto=size is None)
    needed = None
    if chosen is None:
        needed = _needed(methods, ctx, hw, size[1] if size else hw.gpus_per_node)
        reason += _needed_text(needed, hw, size)
    gpu_hours = cost = None
    if req.hours is not None and (chosen is not None or size is not None):
        gpus = chosen.layout.gpus if chosen is not None else size[0] * size[1]  # type: ignore[index]
        gpu_hours = gpus * req.hours
        cost = None if hw.gpu_hour_price is None else round(gpu_hours * hw.gpu_hour_price, 2)
    return PlanEstimate(hw, req, largest, assumed, ctx.usable_gpu, ctx.usable_host, tuple(cands),
                        chosen, reason, needed, gpu_hours, cost)


def _needed_text(needed: Optional[Candidate], hw: Hardware, size: Optional[tuple[int, int]]) -> str:
    where = (f"on {size[0]} node{'s' if size[0] > 1 else ''} x {size[1]} GPUs" if size
             else f"on this site ({hw.max_nodes} node{'s' if hw.max_nodes > 1 else ''} x {hw.gpus_per_node} GPUs)")
    if needed is None:
        return (f" {where}, and no GPU count would help: the per-GPU or per-node memory that does not shrink "
                f"with more GPUs (largest layer, replicated weights, activations, host copies) is already too big; "
                f"use bigger GPUs or nodes with more memory")
    return (f" {where}; {needed.method.label} would need {needed.layout.gpus} GPUs "
            f"({needed.layout.nodes} node{'s' if needed.layout.nodes > 1 else ''} x {needed.layout.gpus_per_node})")
