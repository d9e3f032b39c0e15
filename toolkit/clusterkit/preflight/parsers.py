"""Total, pure parsers of the text that node tools print.

Every parser takes text and returns a typed result; none runs a command, and none raises on
bad input: text it cannot read becomes a :class:`ParseFailure` that keeps the raw text, so a
node printing garbage is reported as "could not parse" on that node instead of crashing the
whole preflight.  The formats are those of the real tools (nvidia-smi, ibstat, the sysfs
InfiniBand tree, /proc/mounts, ``df -P``, ``stat -f``, lsmod, ``sacct --parsable2``,
``squeue``); the tests feed them captured text in ``tests/data/preflight/``.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Sequence

RAW_LIMIT = 4000  # keep raw text bounded: a node may print megabytes of garbage


def _clip(text: str) -> str:
    return text if len(text) <= RAW_LIMIT else text[:RAW_LIMIT] + f"... [{len(text) - RAW_LIMIT} more chars]"


@dataclass(frozen=True)
class ParseFailure:
    """Text a parser could not read: what was expected, why it failed, and the raw text."""

    what: str
    reason: str
    raw: str
    tool_error: bool = False  # the tool printed its own error message (not garbage)

    def __str__(self) -> str:
        return f"{self.what}: {self.reason}"


def _failure(what: str, reason: str, raw: str) -> ParseFailure:
    return ParseFailure(what, reason, _clip(raw))


def _tool_error(what: str, text: str, prefixes: tuple[str, ...]) -> ParseFailure | None:
    """A one-line ``tool: message`` error (``df: /x: No such file or directory``), if that is all."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    if len(lines) == 1 and lines[0].startswith(prefixes):
        return ParseFailure(what, lines[0], _clip(text), tool_error=True)
    return None


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped (for one-line messages)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def version_tuple(text: str) -> tuple[int, ...] | None:
    """``"535.104.05"`` -> ``(535, 104, 5)``; None if ``text`` is not a dotted number."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)*)\s*", text or "")
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def version_at_least(have: str, need: str) -> bool | None:
    """Compare dotted versions numerically (``"550.54.15" >= "535.104"``); None if unreadable."""
    h, n = version_tuple(have), version_tuple(need)
    if h is None or n is None:
        return None
    width = max(len(h), len(n))
    return h + (0,) * (width - len(h)) >= n + (0,) * (width - len(n))


# ---------------------------------------------------------------------------------------------
# nvidia-smi
# ---------------------------------------------------------------------------------------------

#: The fields the preflight script asks for, in this order (``--query-gpu=...``).
GPU_QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "driver_version",
    "memory.total",
    "persistence_mode",
    "ecc.errors.uncorrected.volatile.total",
    "mig.mode.current",
    "pci.bus_id",
)

# Cell values nvidia-smi prints when it has no number to give.
_NA_VALUES = {"[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "[Insufficient Permissions]"}
_ERR_VALUES = {"ERR!", "[ERR!]", "[GPU is lost]", "[Unknown Error]"}


class GpuState(str, Enum):
    """What nvidia-smi said about the node as a whole."""

    OK = "ok"
    NO_DEVICES = "no_devices"  # "No devices were found"
    DRIVER_FAILED = "driver_failed"  # "NVIDIA-SMI has failed because it couldn't communicate..."
    NOT_INSTALLED = "not_installed"  # command not found


@dataclass(frozen=True)
class Gpu:
    """One row of ``nvidia-smi --query-gpu``.  ``None`` means the tool gave no value."""

    index: int
    name: str
    driver_version: str | None
    memory_total_mib: int | None
    persistence_mode: bool | None
    ecc_uncorrected: int | None
    ecc_raw: str  # the cell as printed: "0", "[N/A]", "[Not Supported]", "ERR!"
    mig_mode: str | None  # "Enabled" / "Disabled" / None when not applicable
    pci_bus_id: str | None

    @property
    def ecc_unreadable(self) -> bool:
        """True when the ECC counter cell is an error marker (``ERR!``), not merely N/A."""
        return self.ecc_raw in _ERR_VALUES


@dataclass(frozen=True)
class GpuQuery:
    """The parsed ``nvidia-smi --query-gpu`` section."""

    state: GpuState
    gpus: tuple[Gpu, ...] = ()
    message: str = ""  # nvidia-smi's own words when state is not OK
    raw: str = ""

    @property
    def driver_versions(self) -> set[str]:
        return {g.driver_version for g in self.gpus if g.driver_version}


_DRIVER_FAILED_RE = re.compile(
    r"NVIDIA-SMI has failed|couldn't communicate with the NVIDIA driver|Failed to initialize NVML|"
    r"Driver/library version mismatch|Unable to determine the device handle",
    re.IGNORECASE,
)
_NOT_FOUND_RE = re.compile(r"nvidia-smi: (command )?not found|No such file or directory", re.IGNORECASE)


def _na(cell: str) -> bool:
    return cell in _NA_VALUES or cell in _ERR_VALUES or cell == ""


def _int_cell(cell: str) -> int | None:
    """``"81559 MiB"`` / ``"81559"`` -> 81559; N/A markers -> None."""
    m = re.fullmatch(r"(\d+)(?:\s*MiB)?", cell)
    return int(m.group(1)) if m else None


def _gpu_from_row(row: dict[str, str]) -> Gpu | str:
    """Build a Gpu from one CSV row (field -> cell); a string is the reason it is unreadable."""
    index = row.get("index", "")
    if not index.isdigit():
        return f"GPU index {index!r} is not a number"
    name = row.get("name", "")
    if not name or _na(name):
        return f"GPU {index} has no name ({name!r})"
    persistence = row.get("persistence_mode", "")
    if persistence not in ("Enabled", "Disabled") and not _na(persistence):
        return f"GPU {index} persistence mode {persistence!r} is neither Enabled nor Disabled"
    ecc = row.get("ecc.errors.uncorrected.volatile.total", "[N/A]")
    if not ecc.isdigit() and not _na(ecc):
        return f"GPU {index} ECC counter {ecc!r} is not a number"
    driver = row.get("driver_version", "")
    if not _na(driver) and version_tuple(driver) is None:
        return f"GPU {index} driver version {driver!r} is not a version"
    mig = row.get("mig.mode.current", "[N/A]")
    bus = row.get("pci.bus_id", "")
    return Gpu(
        index=int(index),
        name=name,
        driver_version=None if _na(driver) else driver,
        memory_total_mib=_int_cell(row.get("memory.total", "")),
        persistence_mode=None if _na(persistence) else persistence == "Enabled",
        ecc_uncorrected=int(ecc) if ecc.isdigit() else None,
        ecc_raw=ecc,
        mig_mode=None if _na(mig) else mig,
        pci_bus_id=None if _na(bus) else bus,
    )


def parse_gpu_query(text: str, fields: Sequence[str] = GPU_QUERY_FIELDS) -> GpuQuery | ParseFailure:
    """Parse ``nvidia-smi --query-gpu=<fields> --format=csv,noheader[,nounits]`` output.

    Known whole-node answers (no devices, driver not loaded, command missing) become a
    :class:`GpuQuery` with that state; rows that do not fit the field list are a ParseFailure.
    """
    what = "nvidia-smi --query-gpu"
    stripped = text.strip()
    if not stripped:
        return _failure(what, "no output", text)
    if re.search(r"No devices were found", stripped):
        return GpuQuery(GpuState.NO_DEVICES, message=first_line(stripped), raw=_clip(text))
    if _DRIVER_FAILED_RE.search(stripped):
        return GpuQuery(GpuState.DRIVER_FAILED, message=first_line(stripped), raw=_clip(text))
    if _NOT_FOUND_RE.search(stripped):
        return GpuQuery(GpuState.NOT_INSTALLED, message=first_line(stripped), raw=_clip(text))
    gpus: list[Gpu] = []
    lines = [ln for ln in stripped.splitlines() if ln.strip()]
    for lineno, cells in enumerate(csv.reader(lines, skipinitialspace=True), start=1):
        if len(cells) != len(fields):
            return _failure(what, f"line {lineno} has {len(cells)} fields, expected {len(fields)}", text)
        gpu = _gpu_from_row({f: c.strip() for f, c in zip(fields, cells)})
        if isinstance(gpu, str):
            return _failure(what, f"line {lineno}: {gpu}", text)
        gpus.append(gpu)
    return GpuQuery(GpuState.OK, tuple(gpus), raw=_clip(text))


_CUDA_RE = re.compile(r"CUDA Version\s*:\s*(\d+\.\d+(?:\.\d+)?)", re.IGNORECASE)


def parse_cuda_version(text: str) -> str | ParseFailure:
    """The CUDA version the driver supports, from ``nvidia-smi --version`` or the plain header.

    Both print ``CUDA Version: 12.4`` (``--version`` pads the colon: ``CUDA Version        : 12.4``).
    """
    m = _CUDA_RE.search(text or "")
    if m:
        return m.group(1)
    return _failure("nvidia-smi CUDA version", "no 'CUDA Version: X.Y' in the output", text)


# ---------------------------------------------------------------------------------------------
# InfiniBand: sysfs tree and ibstat
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IbPort:
    """One HCA port.  ``state`` is upper case (ACTIVE, DOWN, INIT, ARMED), as sysfs spells it."""

    hca: str
    port: int
    state: str | None = None
    phys_state: str | None = None  # LinkUp, Disabled, Polling, ...
    rate_gbps: float | None = None
    link_layer: str | None = None  # InfiniBand or Ethernet

    @property
    def label(self) -> str:
        return f"{self.hca} port {self.port}"


@dataclass(frozen=True)
class IbInventory:
    """All HCA ports found on a node (possibly none) and where the facts came from."""

    ports: tuple[IbPort, ...]
    source: str  # "sysfs", "ibstat" or "none"
    raw: str = ""

    @property
    def hcas(self) -> list[str]:
        return sorted({p.hca for p in self.ports})

    def ports_of(self, hca: str) -> list[IbPort]:
        return sorted((p for p in self.ports if p.hca == hca), key=lambda p: p.port)


_SYSFS_LINE_RE = re.compile(
    r"(?:.*?)/sys/class/infiniband/(?P<hca>[^/]+)/ports/(?P<port>\d+)/(?P<attr>state|phys_state|rate|link_layer):(?P<value>.*)"
)
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:Gb/sec|Gb/s)?")
# ibstat spells states in mixed case; sysfs in upper case.  One vocabulary for the checks.
_IBSTAT_STATE = {"active": "ACTIVE", "down": "DOWN", "initializing": "INIT", "init": "INIT", "armed": "ARMED"}


def _sysfs_value(attr: str, value: str) -> tuple[str, object]:
    """sysfs attribute text -> (IbPort field, value): ``4: ACTIVE`` -> ("state", "ACTIVE")."""
    value = value.strip()
    if attr in ("state", "phys_state"):
        # "4: ACTIVE", "5: LinkUp" - the number is the IBTA code, the word is what people read
        word = value.split(":", 1)[1].strip() if ":" in value else value
        return attr, (word.upper() if attr == "state" else word) or None
    if attr == "rate":
        m = _RATE_RE.match(value)
        return "rate_gbps", float(m.group(1)) if m else None
    return "link_layer", value or None


def parse_ib_sysfs(text: str) -> IbInventory | ParseFailure:
    """Parse ``grep -H '' /sys/class/infiniband/*/ports/*/{state,phys_state,rate,link_layer}``.

    Lines look like ``/sys/class/infiniband/mlx5_0/ports/1/state:4: ACTIVE`` (any path prefix,
    e.g. a test sysroot, is allowed).  Empty text means no HCA at all (an empty inventory).
    """
    ports: dict[tuple[str, int], dict[str, object]] = {}
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        m = _SYSFS_LINE_RE.fullmatch(line.strip())
        if not m:
            return _failure("infiniband sysfs", f"unexpected line {line.strip()[:80]!r}", text)
        key = (m.group("hca"), int(m.group("port")))
        attr, value = _sysfs_value(m.group("attr"), m.group("value"))
        ports.setdefault(key, {})[attr] = value
    found = tuple(IbPort(hca, port, **attrs) for (hca, port), attrs in sorted(ports.items()))  # type: ignore[arg-type]
    return IbInventory(found, "sysfs" if found else "none", _clip(text or ""))


def _ibstat_port_attr(port: dict[str, object], key: str, value: str) -> None:
    if key == "State":
        port["state"] = _IBSTAT_STATE.get(value.lower(), value.upper())
    elif key == "Physical state":
        port["phys_state"] = value
    elif key == "Rate":
        m = _RATE_RE.match(value)
        port["rate_gbps"] = float(m.group(1)) if m else None
    elif key == "Link layer":
        port["link_layer"] = value


def parse_ibstat(text: str) -> IbInventory | ParseFailure:
    """Parse ``ibstat`` output: ``CA 'mlx5_0'`` blocks with indented ``Port N:`` sub-blocks."""
    what = "ibstat"
    ports: list[IbPort] = []
    hca: str | None = None
    current: dict[str, object] | None = None

    def flush() -> None:
        if current is not None:
            ports.append(IbPort(**current))  # type: ignore[arg-type]

    for line in (text or "").splitlines():
        if not line.strip():
            continue
        ca = re.fullmatch(r"CA '([^']+)'\s*", line)
        port = re.fullmatch(r"\s+Port (\d+):\s*", line)
        kv = re.fullmatch(r"\s+([A-Za-z][A-Za-z ]*?):\s*(.*)", line)
        if ca:
            flush()
            hca, current = ca.group(1), None
        elif port and hca is not None:
            flush()
            current = {"hca": hca, "port": int(port.group(1))}
        elif kv and hca is not None:
            if current is not None:
                _ibstat_port_attr(current, kv.group(1), kv.group(2).strip())
        else:
            return _failure(what, f"unexpected line {line.strip()[:80]!r}", text)
    flush()
    if not ports and (text or "").strip():
        return _failure(what, "no 'CA ... Port N:' blocks", text)
    return IbInventory(tuple(ports), "ibstat" if ports else "none", _clip(text or ""))


def parse_ib(text: str) -> IbInventory | ParseFailure:
    """Parse either form the preflight script may return (sysfs lines, else ibstat output)."""
    if re.search(r"^CA '", text or "", re.MULTILINE):
        return parse_ibstat(text)
    return parse_ib_sysfs(text)


# ---------------------------------------------------------------------------------------------
# mounts, df, stat -f
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    """One /proc/mounts entry, with the kernel's octal escapes (``\\040`` = space) decoded."""

    source: str
    mountpoint: str
    fstype: str
    options: tuple[str, ...]


def _unescape_mount(field_text: str) -> str:
    # The kernel escapes space, tab, newline and backslash in /proc/mounts as \ooo octal.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_text)


def parse_mounts(text: str) -> tuple[Mount, ...] | ParseFailure:
    """Parse /proc/mounts (``source mountpoint fstype options dump pass`` per line)."""
    err = _tool_error("/proc/mounts", text, ("cat:",))
    if err is not None:
        return err
    mounts: list[Mount] = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 6 or not parts[1].startswith("/") or not (parts[4].isdigit() and parts[5].isdigit()):
            return _failure("/proc/mounts", f"unexpected line {line.strip()[:80]!r}", text)
        src, mnt, fstype, opts = (_unescape_mount(p) for p in parts[:4])
        mounts.append(Mount(src, mnt, fstype, tuple(opts.split(","))))
    if not mounts:
        return _failure("/proc/mounts", "no mount entries", text or "")
    return tuple(mounts)


def find_mount(mounts: Iterable[Mount], path: str) -> Mount | None:
    """The mount that serves ``path``: the longest mount point that is ``path`` or a parent of it.

    Later entries win over earlier ones with the same mount point (over-mounts).
    """
    path = "/" + path.strip("/") if path != "/" else "/"
    best: Mount | None = None
    for m in mounts:
        mp = m.mountpoint.rstrip("/") or "/"
        if path == mp or mp == "/" or path.startswith(mp + "/"):
            if best is None or len(mp) >= len(best.mountpoint.rstrip("/") or "/"):
                best = m
    return best


@dataclass(frozen=True)
class DiskSpace:
    """Free space of one file system, in bytes."""

    source: str
    mountpoint: str
    total_bytes: int
    available_bytes: int

    @property
    def available_gb(self) -> float:
        return self.available_bytes / 1e9


_DF_ROW_RE = re.compile(r"(?P<src>.+?)\s+(?P<total>\d+)\s+(?P<used>\d+)\s+(?P<avail>\d+)\s+(?P<cap>\d+%|-)\s+(?P<mnt>/.*)")


def parse_df(text: str) -> DiskSpace | ParseFailure:
    """Parse ``df -P [-k] PATH`` (header + one row); the block size comes from the header."""
    what = "df -P"
    err = _tool_error(what, text, ("df:",))
    if err is not None:
        return err
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    if len(lines) < 2:
        return _failure(what, f"expected a header and one row, got {len(lines)} line(s): {first_line(text or '')!r}", text or "")
    header = re.match(r"^Filesystem\s+(\d+)-blocks\s", lines[0])
    if not header:
        return _failure(what, f"unexpected header {lines[0][:80]!r}", text)
    row = _DF_ROW_RE.fullmatch(lines[-1].strip())
    if not row:
        return _failure(what, f"unexpected row {lines[-1].strip()[:80]!r}", text)
    block = int(header.group(1))
    return DiskSpace(row.group("src"), row.group("mnt"), int(row.group("total")) * block, int(row.group("avail")) * block)


@dataclass(frozen=True)
class StatFs:
    """``stat -f PATH``: file-system type as the kernel names it, and free space."""

    fstype: str
    block_size: int
    total_blocks: int
    available_blocks: int

    @property
    def available_bytes(self) -> int:
        return self.block_size * self.available_blocks


def parse_stat_f(text: str) -> StatFs | ParseFailure:
    """Parse the default ``stat -f PATH`` output of GNU coreutils."""
    what = "stat -f"
    t = text or ""
    fstype = re.search(r"\bType:\s*(\S+)", t)
    block = re.search(r"(?<!Fundamental )\bBlock size:\s*(\d+)", t)
    blocks = re.search(r"Blocks:\s*Total:\s*(\d+)\s+Free:\s*(\d+)\s+Available:\s*(\d+)", t)
    if not (fstype and block and blocks):
        return _failure(what, f"not stat -f output: {first_line(t)[:80]!r}", t)
    return StatFs(fstype.group(1), int(block.group(1)), int(blocks.group(1)), int(blocks.group(3)))


# ---------------------------------------------------------------------------------------------
# kernel modules
# ---------------------------------------------------------------------------------------------


def parse_modules(text: str) -> frozenset[str]:
    """Module names from ``lsmod``, ``/proc/modules`` or ``/sys/module/<name>`` path lines.

    Always succeeds: lines that name no module are ignored (the question asked of this text
    is only ever "is module X loaded", and unrelated noise does not change the answer).
    """
    names: set[str] = set()
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("Module "):
            continue
        sysfs = re.search(r"/sys/module/([A-Za-z0-9_]+)/?$", line)
        if sysfs:
            names.add(sysfs.group(1))
            continue
        # lsmod: "nvidia_peermem  16384  0"; /proc/modules: "nvidia_peermem 16384 0 - Live 0x0 (OE)"
        m = re.match(r"^([A-Za-z0-9_]+)\s+\d+\s+\d+", line)
        if m:
            names.add(m.group(1))
    return frozenset(names)


__all__ = [
    "GPU_QUERY_FIELDS",
    "DiskSpace",
    "Gpu",
    "GpuQuery",
    "GpuState",
    "IbInventory",
    "IbPort",
    "Mount",
    "ParseFailure",
    "StatFs",
    "find_mount",
    "first_line",
    "parse_cuda_version",
    "parse_df",
    "parse_gpu_query",
    "parse_ib",
    "parse_ib_sysfs",
    "parse_ibstat",
    "parse_modules",
    "parse_mounts",
    "parse_stat_f",
    "version_at_least",
    "version_tuple",
]
