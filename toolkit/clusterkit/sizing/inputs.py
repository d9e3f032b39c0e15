"""What ``clusterkit plan`` is asked: the model size as the user writes it, the site's hardware as
plain numbers, and the request, checked: an impossible request is a one-line :class:`InputError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clusterkit.config.schema import Site

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from clusterkit.errors import InputError
from clusterkit.sizing.model import BUFFER_FACTOR, DEFAULT_HEADROOM, Shape
from clusterkit.vocab import LAUNCHERS

OFFLOADS: tuple[str, ...] = ("none", "optimizer", "optimizer+params")

#: Largest parameter count read: the float arithmetic of the memory model overflows long before 1e400.
MAX_PARAMS = 10**16
# Bounds on the other numbers: far above any real model or run, low enough that no figure of
# the memory model overflows a float (which --json would print as Infinity)
MAX_BUFFER_FACTOR = 100.0
MAX_HOURS = 1e6
MAX_SHAPE = 10**9
_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}
_SIZE_RE = re.compile(r"\s*([+-]?)\s*((?:\d[\d_]*)?(?:\.\d*)?(?:[eE][+-]?\d+)?)\s*([kKmMbBgGtT]?)\s*")


def parse_size(text: str, what: str = "--model-params") -> int:
    """Parse a parameter count: ``7B``, ``70e9``, ``350M``, ``1.5T``, ``1_000_000`` or a plain int.

    Suffixes are decimal (K=1e3, M=1e6, B/G=1e9, T=1e12), as model sizes are quoted.  Raises
    :class:`InputError` (one line naming ``what``) for zero, negative, fractional or unparseable input.
    """
    match = _SIZE_RE.fullmatch(text)
    number = match.group(2).replace("_", "") if match else ""
    if not match or not any(c.isdigit() for c in number):
        raise InputError(f"{what}: cannot read {text!r} as a parameter count (examples: 7B, 70e9, 350M, 1.5T)")
    try:
        mantissa = Decimal(number)
        if mantissa and mantissa.adjusted() > 30:  # 1e999999999: the product would overflow Decimal
            raise InputError(f"{what}: {text!r} is more than {human_count(MAX_PARAMS)} parameters (the limit)")
        value = mantissa * _SUFFIX[match.group(3).upper()]
    except InvalidOperation:  # pragma: no cover - the regex admits only decimal syntax
        raise InputError(f"{what}: cannot read {text!r} as a parameter count") from None
    if match.group(1) == "-" and value != 0:
        raise InputError(f"{what}: {text!r} is negative; a parameter count must be positive")
    if value == 0:
        raise InputError(f"{what}: {text!r} is zero; a parameter count must be positive")
    if value > MAX_PARAMS:
        raise InputError(f"{what}: {text!r} is more than {human_count(MAX_PARAMS)} parameters (the limit)")
    if value != value.to_integral_value():
        raise InputError(f"{what}: {text!r} is not a whole number of parameters")
    return int(value)


def human_count(n: int) -> str:
    """``7000000000`` -> ``7B``; ``1500000000000`` -> ``1.5T`` (decimal units, 3 significant digits)."""
    for suffix, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return str(n)


@dataclass(frozen=True)
class Hardware:
    """What the estimate needs from a site, as plain numbers (``site.nodes``, ``site.cost``).

    Memory sizes are GiB (2**30 bytes), the unit DeepSpeed's estimators print as "GB".
    """

    gpus_per_node: int
    gpu_mem_gib: float
    host_mem_gib: float
    max_nodes: int
    gpu_hour_price: float | None = None
    currency: str = "USD"

    @classmethod
    def from_site(cls, site: Site) -> Hardware:
        """The numbers the estimate needs from a validated site."""
        cost = site.cost
        return cls(gpus_per_node=site.nodes.gpus_per_node, gpu_mem_gib=float(site.nodes.gpu_mem_gb),
                   host_mem_gib=float(site.nodes.mem_gb), max_nodes=len(site.nodes.hosts),
                   gpu_hour_price=cost.gpu_hour if cost else None, currency=cost.currency if cost else "USD")


@dataclass(frozen=True)
class SizingRequest:
    """What the user asked: the model, and optionally the size, launcher and offload to use."""

    total_params: int
    largest_layer_params: int | None = None
    gpus: int | None = None
    nodes: int | None = None
    launcher: str | None = None
    offload: str | None = None
    zero_init: bool = True
    headroom: float = DEFAULT_HEADROOM
    buffer_factor: float = BUFFER_FACTOR
    hours: float | None = None
    shape: Shape | None = None  # given (with a sequence length): activations count too


def check_request(hw: Hardware, req: SizingRequest) -> None:
    """Reject impossible requests with one line each (InputError, exit 2)."""
    if req.largest_layer_params is not None and req.largest_layer_params > req.total_params:
        raise InputError(f"--largest-layer-params {human_count(req.largest_layer_params)} is larger than "
                         f"--model-params {human_count(req.total_params)}")
    if req.gpus is not None and req.nodes is not None:
        raise InputError("give --gpus or --nodes, not both")
    if req.gpus is not None:
        if req.gpus < 1:
            raise InputError(f"--gpus {req.gpus}: must be at least 1")
        if req.gpus > hw.gpus_per_node and req.gpus % hw.gpus_per_node:
            raise InputError(f"--gpus {req.gpus} is not a multiple of the site's {hw.gpus_per_node} GPUs per node")
    if req.nodes is not None and req.nodes < 1:
        raise InputError(f"--nodes {req.nodes}: must be at least 1")
    nodes = req.nodes if req.nodes is not None else -(-(req.gpus or 0) // hw.gpus_per_node)
    if nodes > hw.max_nodes:
        raise InputError(f"{nodes} nodes asked for, but the site has {hw.max_nodes}")
    if not 0 <= req.headroom < 1:
        raise InputError(f"--headroom {req.headroom}: must be at least 0 and below 1")
    if not 0 < req.buffer_factor <= MAX_BUFFER_FACTOR:
        raise InputError(f"--buffer-factor {req.buffer_factor}: must be positive and at most {MAX_BUFFER_FACTOR}")
    if req.hours is not None and not 0 < req.hours <= MAX_HOURS:
        raise InputError(f"--hours {req.hours}: must be positive and at most {MAX_HOURS:g}")
    if req.shape is not None:
        sh = req.shape
        for name, value in (("--seq-len", sh.seq_len), ("--micro-batch", sh.micro_batch),
                            ("--hidden-size", sh.hidden), ("--layers", sh.layers), ("--vocab-size", sh.vocab)):
            if not 1 <= value <= MAX_SHAPE:
                raise InputError(f"{name} {value}: must be at least 1 and at most {MAX_SHAPE:.0e}")
    if req.launcher is not None and req.launcher not in LAUNCHERS:
        raise InputError(f"--launcher {req.launcher!r}: choose one of {', '.join(LAUNCHERS)}")
    if req.offload is not None and req.offload not in OFFLOADS:
        raise InputError(f"--offload {req.offload!r}: choose one of {', '.join(OFFLOADS)}")
