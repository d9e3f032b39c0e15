"""The memory model: bytes of model states per GPU and per node for each way to train, and
activations when a sequence length is given.

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
from dataclasses import dataclass

GIB = 2**30
#: DeepSpeed's ``additional_buffer_factor`` default: slack on the host (CPU) figures only.
BUFFER_FACTOR = 1.5
#: Fraction of GPU and host memory kept free for activations, CUDA context, NCCL buffers, fragmentation.
DEFAULT_HEADROOM = 0.2


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


def make_shape(total_params: int, seq_len: int, micro_batch: int = 1, hidden: int | None = None,
               layers: int | None = None, vocab: int | None = None) -> Shape:
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


