"""The recommendation: every candidate at the size asked (or the fewest nodes where it fits), the
rule of thumb by model size, the setup chosen and why, and what it would cost (pure)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from clusterkit.errors import InputError
from clusterkit.sizing.candidates import (
    METHOD_BY_KEY,
    METHODS,
    ZERO_LAUNCHERS,
    Candidate,
    Ctx,
    Method,
    evaluate,
    first_fit,
)
from clusterkit.sizing.inputs import Hardware, SizingRequest, check_request, human_count
from clusterkit.sizing.model import GIB, default_largest_layer

#: How far the "how many GPUs would it take" search looks (nodes).
_SEARCH_LIMIT_NODES = 1_000_000


# --------------------------------------------------------------------------- recommendation


def rule_of_thumb(total_params: int, launcher: str | None = None) -> tuple[list[str], str]:
    """The usual choice by model size: method keys in order of preference, and the rule in words.

    Under 1B: DDP; 1B-10B: FSDP or ZeRO-3 (ZeRO-3 first when DeepSpeed launches); 10B-100B:
    ZeRO-2/3 across nodes; over 100B: Megatron tensor + pipeline parallel with ZeRO.
    """
    if total_params < 10**9:
        return ["ddp"], "under 1B parameters: DDP"
    if total_params < 10**10:
        keys = ["zero3", "fsdp"] if launcher in ZERO_LAUNCHERS else ["fsdp", "zero3"]
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


def _why_not(c: Candidate, ctx: Ctx, auto: bool, max_nodes: int) -> str:
    where = f"on up to {max_nodes} node{'s' if max_nodes > 1 else ''}" if auto else f"on {c.describe_size()}"
    if not c.fits_gpu:
        return (f"{c.method.label} does not fit {where}: {_gib(c.gpu_total)}{_split(c)} per GPU > "
                f"{_gib(ctx.usable_gpu)} usable")
    return (f"{c.method.label} does not fit {where}: {_gib(c.host_bytes)} host memory per node > "
            f"{_gib(ctx.usable_host)} usable")


def _split(c: Candidate) -> str:
    return f" ({_gib(c.gpu_bytes)} model states + {_gib(c.act_bytes)} activations)" if c.act_bytes else ""


def _fits_text(c: Candidate, ctx: Ctx) -> str:
    return (f"{c.method.label} fits on {c.describe_size()}: {_gib(c.gpu_total)}{_split(c)} of "
            f"{_gib(ctx.usable_gpu)} usable per GPU, {_gib(c.host_bytes)} of {_gib(ctx.usable_host)} usable host "
            "memory per node")


@dataclass(frozen=True)
class Sizing:
    """The answer: every candidate, the recommended one and why, and what it would cost."""

    hardware: Hardware
    request: SizingRequest
    largest_layer_params: int
    largest_layer_assumed: bool
    usable_gpu_bytes: float
    usable_host_bytes: float
    candidates: tuple[Candidate, ...]
    recommended: Candidate | None
    reason: str
    needed: Candidate | None = None  # when nothing fits: the smallest setup that would
    gpu_hours: float | None = None
    cost: float | None = None

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


def _available(req: SizingRequest) -> list[Method]:
    # a launcher the user names is the one the setup will run under
    methods = [replace(m, launcher=req.launcher or m.launcher) for m in METHODS
               if (req.launcher is None or req.launcher in m.launchers)
               and (req.offload is None or m.offload == req.offload)]
    if not methods:
        raise InputError(f"no setup runs under --launcher {req.launcher} with --offload {req.offload}")
    return methods


def _fixed_size(hw: Hardware, req: SizingRequest) -> tuple[int, int] | None:
    """``(nodes, gpus_per_node)`` when the user fixed the size; a count below one node stays on one."""
    if req.nodes is not None:
        return req.nodes, hw.gpus_per_node
    if req.gpus is not None:
        if req.gpus < hw.gpus_per_node:
            return 1, req.gpus
        return req.gpus // hw.gpus_per_node, hw.gpus_per_node
    return None


def _candidates(methods: list[Method], ctx: Ctx, hw: Hardware, size: tuple[int, int] | None) -> list[Candidate]:
    """Each method at the fixed size, or at the fewest nodes of the site where it fits."""
    out = []
    for m in methods:
        if size is not None:
            out.append(evaluate(m, ctx, size[0], size[1]))
            continue
        fit = first_fit(m, ctx, hw.gpus_per_node, 1, hw.max_nodes)
        out.append(fit or _closest(m, ctx, hw))
    return out


def _closest(method: Method, ctx: Ctx, hw: Hardware) -> Candidate:
    """Where a method fits nowhere on the site, the size that comes closest.

    That is the whole site for most methods (memory per GPU shrinks with more GPUs), but one node
    where more nodes do not help (DDP) or make it worse (ZeRO-2 offload's host figure).
    """
    one = evaluate(method, ctx, 1, hw.gpus_per_node)
    full = evaluate(method, ctx, hw.max_nodes, hw.gpus_per_node)
    return min((one, full), key=lambda c: (not c.fits_gpu, c.gpu_total, not c.fits_host, c.layout.nodes))


def _recommend(cands: list[Candidate], ctx: Ctx, hw: Hardware, req: SizingRequest,
               auto: bool) -> tuple[Candidate | None, str]:
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
            return cand, f"{head}. {'; '.join([*notes, _fits_text(cand, ctx)])}."
        if key in rule_keys:
            notes.append(_why_not(cand, ctx, auto, hw.max_nodes))
    return None, f"{head}. " + "; ".join(notes) + ("; " if notes else "") + "nothing fits"


def _needed(methods: list[Method], ctx: Ctx, hw: Hardware, gpus_per_node: int) -> Candidate | None:
    """The setup with the fewest GPUs that would fit, at any node count (the site's size aside)."""
    fits = [first_fit(m, ctx, gpus_per_node, 1, _SEARCH_LIMIT_NODES) for m in methods]
    found = [c for c in fits if c is not None]
    return min(found, key=lambda c: (c.layout.gpus, [m.key for m in METHODS].index(c.method.key))) if found else None


def size_job(hw: Hardware, req: SizingRequest) -> Sizing:
    """Evaluate every candidate setup for ``req`` on ``hw`` and recommend one (pure)."""
    check_request(hw, req)
    assumed = req.largest_layer_params is None
    largest = default_largest_layer(req.total_params) if assumed else req.largest_layer_params
    assert largest is not None
    ctx = Ctx(req.total_params, largest, req.zero_init, req.buffer_factor,
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
    gpus = chosen.layout.gpus if chosen is not None else size[0] * size[1] if size is not None else None
    if req.hours is not None and gpus is not None:
        gpu_hours = gpus * req.hours
        cost = None if hw.gpu_hour_price is None else round(gpu_hours * hw.gpu_hour_price, 2)
    return Sizing(hw, req, largest, assumed, ctx.usable_gpu, ctx.usable_host, tuple(cands),
                        chosen, reason, needed, gpu_hours, cost)


def _needed_text(needed: Candidate | None, hw: Hardware, size: tuple[int, int] | None) -> str:
    where = (f"on {size[0]} node{'s' if size[0] > 1 else ''} x {size[1]} GPUs" if size
             else f"on this site ({hw.max_nodes} node{'s' if hw.max_nodes > 1 else ''} x {hw.gpus_per_node} GPUs)")
    if needed is None:
        return (f" {where}, and no GPU count would help: the per-GPU or per-node memory that does not shrink "
                f"with more GPUs (largest layer, replicated weights, activations, host copies) is already too big; "
                f"use bigger GPUs or nodes with more memory")
    return (f" {where}; {needed.method.label} would need {needed.layout.gpus} GPUs "
            f"({needed.layout.nodes} node{'s' if needed.layout.nodes > 1 else ''} x {needed.layout.gpus_per_node})")
