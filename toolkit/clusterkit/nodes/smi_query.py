"""A total parser of ``nvidia-smi -q``: per GPU, what the health checks read - row remapping,
retired pages, the PCIe link (generation and width, current and maximum), the performance
state and the clock event (throttle) reasons.

``nvidia-smi -q`` prints one block per GPU (``GPU 00000000:19:00.0`` at column 0), each a tree
of ``Key : Value`` lines nested by indentation.  Values the driver does not report are kept as
printed (``N/A``); a value that is neither a known answer nor ``N/A`` is kept too, so a check can
say it could not read it.  Nothing here raises: text that is no ``nvidia-smi -q`` output is a
:class:`~clusterkit.tooltext.ParseFailure` with the raw text kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clusterkit.tooltext import ParseFailure, failure, first_line, parse_int

_GPU_LINE = re.compile(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*")
_KEY_VALUE = re.compile(r"([^:]*?)\s*:\s?(.*)")
_MAX_GPUS = 64
_MAX_LINES = 200_000

# the section names: 'Clocks Throttle Reasons' until driver 530, 'Clocks Event Reasons' after
_CLOCK_REASONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")
# the reasons that mean the hardware slowed the clocks (heat, power brake, an external signal)
HW_SLOWDOWNS = ("HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown")


@dataclass
class _Node:
    key: str
    value: str | None
    children: list[_Node] = field(default_factory=list)

    def child(self, *path: str) -> _Node | None:
        node: _Node | None = self
        for key in path:
            node = next((c for c in node.children if c.key == key), None) if node else None
        return node

    def value_of(self, *path: str) -> str | None:
        node = self.child(*path)
        return node.value if node is not None else None


@dataclass(frozen=True)
class GpuHealth:
    """One GPU's block of ``nvidia-smi -q``; every field as printed (None: not printed at all)."""

    bus_id: str
    remap_pending: str | None = None  # Remapped Rows > Pending: Yes / No / N/A
    remap_failure: str | None = None  # Remapped Rows > Remapping Failure Occurred
    remap_uncorrectable: str | None = None  # Remapped Rows > Uncorrectable Error (rows remapped for)
    retired_pending: str | None = None  # Retired Pages > Pending Page Blacklist / Pending Page Retirement
    retired_dbe: str | None = None  # Retired Pages > Double Bit ECC
    gen_current: int | None = None
    gen_max: int | None = None
    width_current: int | None = None
    width_max: int | None = None
    link_raw: str = ""  # the link values as printed, for a message when they are unreadable
    perf_state: str | None = None  # P0 ... P12
    idle: str | None = None  # Clocks Event Reasons > Idle: Active / Not Active
    slowdowns: tuple[tuple[str, str], ...] = ()  # (HW reason, value as printed)
    has_link_info: bool = False
    has_clock_reasons: bool = False


@dataclass(frozen=True)
class SmiQuery:
    """``nvidia-smi -q``: the GPUs in the order printed."""

    gpus: tuple[GpuHealth, ...]


def _width(text: str | None) -> int | None:
    m = re.fullmatch(r"x?(\d{1,2})x?", (text or "").strip())
    return parse_int(m.group(1), max_digits=2) if m else None


def _gen(text: str | None) -> int | None:
    m = re.fullmatch(r"(?:Gen\s*)?(\d{1,2})", (text or "").strip())
    return parse_int(m.group(1), max_digits=2) if m else None


def _tree(lines: list[str]) -> _Node:
    """The lines of one GPU block as a tree by indentation (tabs count as 8 columns)."""
    root = _Node("", None)
    stack: list[tuple[int, _Node]] = [(-1, root)]
    for raw in lines:
        line = raw.expandtabs(8).rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        m = _KEY_VALUE.fullmatch(line.strip())
        node = _Node(m.group(1), m.group(2).strip()) if m else _Node(line.strip(), None)
        if node.value == "":
            node.value = None
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def _gpu(bus_id: str, block: _Node) -> GpuHealth:
    remap = block.child("Remapped Rows")
    retired = block.child("Retired Pages")
    pages = retired.children if retired else []
    pending_page = next((c.value for c in pages if c.key.startswith("Pending Page")), None)
    link = block.child("PCI", "GPU Link Info")
    gen = link.child("PCIe Generation") if link else None
    width = link.child("Link Width") if link else None
    reasons = next((n for name in _CLOCK_REASONS if (n := block.child(name)) is not None), None)
    slowdowns: list[tuple[str, str]] = []
    if reasons is not None:
        stack = list(reasons.children)
        while stack:
            n = stack.pop(0)
            if n.key in HW_SLOWDOWNS and n.value is not None:
                slowdowns.append((n.key, n.value))
            stack[0:0] = n.children
    gen_max = _gen(gen.value_of("Max")) if gen else None
    if gen is not None and gen_max is None:  # drivers that print only the device's and the host's
        pair = [v for k in ("Device Max", "Host Max") if (v := _gen(gen.value_of(k))) is not None]
        gen_max = min(pair) if pair else None
    raw = " ".join(f"{n.key} {c.key}={c.value}" for n in (gen, width) if n for c in n.children)
    return GpuHealth(
        bus_id=bus_id,
        remap_pending=(remap.value_of("Pending") if remap and remap.children else remap.value if remap else None),
        remap_failure=remap.value_of("Remapping Failure Occurred") if remap else None,
        remap_uncorrectable=remap.value_of("Uncorrectable Error") if remap else None,
        retired_pending=pending_page if retired and retired.children else retired.value if retired else None,
        retired_dbe=retired.value_of("Double Bit ECC") if retired else None,
        gen_current=_gen(gen.value_of("Current")) if gen else None,
        gen_max=gen_max,
        width_current=_width(width.value_of("Current")) if width else None,
        width_max=_width(width.value_of("Max")) if width else None,
        link_raw=raw[:200],
        perf_state=block.value_of("Performance State"),
        idle=reasons.value_of("Idle") if reasons else None,
        slowdowns=tuple(slowdowns),
        has_link_info=link is not None,
        has_clock_reasons=reasons is not None,
    )


def parse_smi_query(text: str) -> SmiQuery | ParseFailure:
    """Parse ``nvidia-smi -q`` (or ``-a``) into the GPUs' health fields."""
    lines = text.splitlines()[:_MAX_LINES]
    blocks: list[tuple[str, list[str]]] = []
    for line in lines:
        m = _GPU_LINE.fullmatch(line)
        if m:
            blocks.append((m.group(1).upper(), []))
        elif blocks and (line.startswith((" ", "\t")) or not line.strip()):
            blocks[-1][1].append(line)
        elif blocks:
            blocks[-1][1].append("")  # a column-0 line after a block (a footer) ends nothing we read
    if not blocks:
        if "NVSMI LOG" in text and re.search(r"Attached GPUs\s*:\s*0\b", text):
            return SmiQuery(())
        reason = first_line(text)[:200] or "no output"
        return failure("nvidia-smi -q", f"no GPU block found ({reason})", text)
    if len(blocks) > _MAX_GPUS:
        return failure("nvidia-smi -q", f"{len(blocks)} GPU blocks, more than {_MAX_GPUS}", text)
    return SmiQuery(tuple(_gpu(bus, _tree(block)) for bus, block in blocks))
