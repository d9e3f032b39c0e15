"""Total, pure parsers of what the GPU and InfiniBand tools print: ``nvidia-smi --query-gpu``,
its CUDA version line, the sysfs InfiniBand tree and ``ibstat``.

Like :mod:`clusterkit.nodes.parsers` (whose :class:`~clusterkit.nodes.parsers.ParseFailure`
they return), none runs a command and none raises on bad input; the tests feed them captured
text in ``tests/data/preflight/``.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypedDict

from clusterkit.nodes.parsers import version_tuple
from clusterkit.tooltext import ParseFailure, clip, failure, first_line, parse_float, parse_int

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
    return parse_int(m.group(1)) if m else None


def _gpu_from_row(row: dict[str, str]) -> Gpu | str:
    """Build a Gpu from one CSV row (field -> cell); a string is the reason it is unreadable."""
    index = row.get("index", "")
    gpu_index = parse_int(index, max_digits=4)
    if gpu_index is None:
        return f"GPU index {index!r} is not a number"
    name = row.get("name", "")
    if not name or _na(name):
        return f"GPU {index} has no name ({name!r})"
    persistence = row.get("persistence_mode", "")
    if persistence not in ("Enabled", "Disabled") and not _na(persistence):
        return f"GPU {index} persistence mode {persistence!r} is neither Enabled nor Disabled"
    ecc = row.get("ecc.errors.uncorrected.volatile.total", "[N/A]")
    ecc_count = parse_int(ecc)
    if ecc_count is None and not _na(ecc):
        return f"GPU {index} ECC counter {ecc!r} is not a number"
    driver = row.get("driver_version", "")
    if not _na(driver) and version_tuple(driver) is None:
        return f"GPU {index} driver version {driver!r} is not a version"
    mig = row.get("mig.mode.current", "[N/A]")
    bus = row.get("pci.bus_id", "")
    return Gpu(
        index=gpu_index,
        name=name,
        driver_version=None if _na(driver) else driver,
        memory_total_mib=_int_cell(row.get("memory.total", "")),
        persistence_mode=None if _na(persistence) else persistence == "Enabled",
        ecc_uncorrected=ecc_count,
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
        return failure(what, "no output", text)
    if re.search(r"No devices were found", stripped):
        return GpuQuery(GpuState.NO_DEVICES, message=first_line(stripped), raw=clip(text))
    if _DRIVER_FAILED_RE.search(stripped):
        return GpuQuery(GpuState.DRIVER_FAILED, message=first_line(stripped), raw=clip(text))
    if _NOT_FOUND_RE.search(stripped):
        return GpuQuery(GpuState.NOT_INSTALLED, message=first_line(stripped), raw=clip(text))
    gpus: list[Gpu] = []
    lines = [ln for ln in stripped.splitlines() if ln.strip()]
    try:
        rows = list(csv.reader(lines, skipinitialspace=True))
    except csv.Error as exc:  # a field past the csv module's limit, a NUL
        return failure(what, f"not CSV: {exc}", text)
    for lineno, cells in enumerate(rows, start=1):
        if len(cells) != len(fields):
            return failure(what, f"line {lineno} has {len(cells)} fields, expected {len(fields)}", text)
        gpu = _gpu_from_row({f: c.strip() for f, c in zip(fields, cells, strict=True)})
        if isinstance(gpu, str):
            return failure(what, f"line {lineno}: {gpu}", text)
        gpus.append(gpu)
    return GpuQuery(GpuState.OK, tuple(gpus), raw=clip(text))


# Driver branch 610 renamed the line: ``CUDA UMD version : 13.3`` (``--version``) and
# ``CUDA UMD Version: 13.3`` (table header), while ``CUDA version`` there says
# ``Deprecated, see "CUDA UMD version" instead``.  The new name wins where both carry a number.
_CUDA_UMD_RE = re.compile(r"CUDA\s+UMD\s+Version\s*:\s*(\d+\.\d+(?:\.\d+)?)", re.IGNORECASE)
_CUDA_RE = re.compile(r"CUDA\s+Version\s*:\s*(\d+\.\d+(?:\.\d+)?)", re.IGNORECASE)
_CUDA_NOT_FOUND_RE = re.compile(r"CUDA\s+(?:UMD\s+)?Version\s*:\s*Not\s+Found", re.IGNORECASE)


def parse_cuda_version(text: str) -> str | ParseFailure:
    """The CUDA version the driver supports, from ``nvidia-smi --version`` or the plain header.

    Drivers before 610 print ``CUDA Version: 12.4`` (``--version`` pads the colon:
    ``CUDA Version        : 12.4``); 610 and later print ``CUDA UMD version : 13.3`` and
    ``CUDA UMD Version: 13.3``.  Spelling case is not relied on; a non-numeric value
    (the deprecation note) is never taken for a version.
    """
    for pattern in (_CUDA_UMD_RE, _CUDA_RE):
        m = pattern.search(text or "")
        if m:
            return m.group(1)
    if _CUDA_NOT_FOUND_RE.search(text or ""):
        # a vGPU host driver (or one without the CUDA user-mode driver) says so instead of a number
        why = "nvidia-smi reports no CUDA version ('CUDA Version : Not Found')"
        return ParseFailure("nvidia-smi CUDA version", why, clip(text or ""), tool_error=True)
    return failure("nvidia-smi CUDA version", "no 'CUDA Version: X.Y' or 'CUDA UMD Version: X.Y' in the output",
                   text)


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
    # ibstat stops at the first device it cannot read (``ibpanic: ... stat of IB device
    # 'mlx5_8' failed: ...``): the devices such lines name, and the lines themselves
    missing: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    # each HCA's device model where the text says it (ibstat's ``CA type: MT4129``, sysfs
    # ``hca_type``): (hca, model) pairs
    models: tuple[tuple[str, str], ...] = ()

    @property
    def hcas(self) -> list[str]:
        return sorted({p.hca for p in self.ports})

    def model_of(self, hca: str) -> str | None:
        return dict(self.models).get(hca)

    def ports_of(self, hca: str) -> list[IbPort]:
        return sorted((p for p in self.ports if p.hca == hca), key=lambda p: p.port)


_SYSFS_LINE_RE = re.compile(
    r"(?:.*?)/sys/class/infiniband/(?P<hca>[^/]+)/ports/(?P<port>\d+)/(?P<attr>state|phys_state|rate|link_layer):(?P<value>.*)"
)
# the device-level model file beside the ports: /sys/class/infiniband/mlx5_0/hca_type:MT4129
_SYSFS_TYPE_RE = re.compile(r"(?:.*?)/sys/class/infiniband/(?P<hca>[^/]+)/hca_type:(?P<value>.*)")
_MODEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:Gb/sec|Gb/s)?")
# ibstat spells states in mixed case; sysfs in upper case.  One vocabulary for the checks.
_IBSTAT_STATE = {"active": "ACTIVE", "down": "DOWN", "initializing": "INIT", "init": "INIT", "armed": "ARMED"}


class _PortFields(TypedDict, total=False):
    """What a parser has read about one port so far: the IbPort fields after ``hca`` and ``port``."""

    state: str | None
    phys_state: str | None
    rate_gbps: float | None
    link_layer: str | None


def _rate(value: str) -> float | None:
    m = _RATE_RE.match(value)
    return parse_float(m.group(1), limit=1e6) if m else None


def _sysfs_field(fields: _PortFields, attr: str, value: str) -> None:
    """sysfs attribute text -> the IbPort field: ``state`` ``4: ACTIVE`` -> state "ACTIVE"."""
    value = value.strip()
    if attr in ("state", "phys_state"):
        # "4: ACTIVE", "5: LinkUp" - the number is the IBTA code, the word is what people read
        word = value.split(":", 1)[1].strip() if ":" in value else value
        if attr == "state":
            fields["state"] = word.upper() or None
        else:
            fields["phys_state"] = word or None
    elif attr == "rate":
        fields["rate_gbps"] = _rate(value)
    else:
        fields["link_layer"] = value or None


def parse_ib_sysfs(text: str) -> IbInventory | ParseFailure:
    """Parse ``grep -H '' /sys/class/infiniband/*/ports/*/{state,phys_state,rate,link_layer}``
    (and ``/sys/class/infiniband/*/hca_type``, the device model).

    Lines look like ``/sys/class/infiniband/mlx5_0/ports/1/state:4: ACTIVE`` (any path prefix,
    e.g. a test sysroot, is allowed).  Empty text means no HCA at all (an empty inventory).
    """
    ports: dict[tuple[str, int], _PortFields] = {}
    models: dict[str, str] = {}
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        t = _SYSFS_TYPE_RE.fullmatch(line.strip())
        if t:
            if _MODEL_RE.fullmatch(t.group("value").strip()):
                models[t.group("hca")] = t.group("value").strip()
            continue
        m = _SYSFS_LINE_RE.fullmatch(line.strip())
        if not m:
            return failure("infiniband sysfs", f"unexpected line {line.strip()[:80]!r}", text)
        port_no = parse_int(m.group("port"), max_digits=4)
        if port_no is None:
            return failure("infiniband sysfs", f"port number {m.group('port')[:20]!r} is not one", text)
        key = (m.group("hca"), port_no)
        _sysfs_field(ports.setdefault(key, _PortFields()), m.group("attr"), m.group("value"))
    found = tuple(IbPort(hca, port, **fields) for (hca, port), fields in sorted(ports.items()))
    named = tuple(sorted((h, m) for h, m in models.items() if any(p.hca == h for p in found)))
    return IbInventory(found, "sysfs" if found else "none", clip(text or ""), models=named)


def _ibstat_port_attr(port: _PortFields, key: str, value: str) -> None:
    if key == "State":
        port["state"] = _IBSTAT_STATE.get(value.lower(), value.upper())
    elif key == "Physical state":
        port["phys_state"] = value
    elif key == "Rate":
        port["rate_gbps"] = _rate(value)
    elif key == "Link layer":
        port["link_layer"] = value


# libibumad's messages: ``ibpanic: [pid] func: text`` (ibstat exits after it), ``ibwarn: ...``
_IB_DIAG_RE = re.compile(r"(ibpanic|ibwarn):\s*\[\d+\]\s*(.*)")
_IB_DIAG_DEVICE_RE = re.compile(r"IB device '([^'\s]{1,64})'")


def parse_ibstat(text: str) -> IbInventory | ParseFailure:
    """Parse ``ibstat`` output: ``CA 'mlx5_0'`` blocks with indented ``Port N:`` sub-blocks.

    An ``ibpanic:`` line (ibstat gave up on one device and exited) keeps what parsed before it;
    the device it names is listed in ``missing`` and the line in ``errors``.
    """
    what = "ibstat"
    ports: list[IbPort] = []
    missing: list[str] = []
    errors: list[str] = []
    models: dict[str, str] = {}
    hca: str | None = None
    current: tuple[str, int, _PortFields] | None = None  # (hca, port, what its lines said)

    def flush() -> None:
        if current is not None:
            ports.append(IbPort(current[0], current[1], **current[2]))

    for line in (text or "").splitlines():
        if not line.strip():
            continue
        ca = re.fullmatch(r"CA '([^']+)'\s*", line)
        port = re.fullmatch(r"\s+Port (\d+):\s*", line)
        kv = re.fullmatch(r"\s+([A-Za-z][A-Za-z ]*?):\s*(.*)", line)
        diag = _IB_DIAG_RE.fullmatch(line.strip())
        if diag:
            errors.append(f"{diag.group(1)}: " + "".join(c for c in diag.group(2)[:200] if c.isprintable()))
            device = _IB_DIAG_DEVICE_RE.search(diag.group(2)) if diag.group(1) == "ibpanic" else None
            if device and device.group(1) not in missing:
                missing.append(device.group(1))
        elif ca:
            flush()
            hca, current = ca.group(1), None
        elif port and hca is not None:
            flush()
            port_no = parse_int(port.group(1), max_digits=4)
            if port_no is None:
                return failure("ibstat", f"port number {port.group(1)[:20]!r} is not one", text)
            current = (hca, port_no, _PortFields())
        elif kv and hca is not None:
            if current is not None:
                _ibstat_port_attr(current[2], kv.group(1), kv.group(2).strip())
            elif kv.group(1) == "CA type" and _MODEL_RE.fullmatch(kv.group(2).strip()):
                models[hca] = kv.group(2).strip()
        else:
            return failure(what, f"unexpected line {line.strip()[:80]!r}", text)
    flush()
    if not ports and not errors and (text or "").strip():
        return failure(what, "no 'CA ... Port N:' blocks", text)
    named = tuple(sorted((h, m) for h, m in models.items() if any(p.hca == h for p in ports)))
    return IbInventory(tuple(ports), "ibstat" if ports or errors else "none", clip(text or ""),
                       tuple(missing), tuple(errors), named)


def parse_ib(text: str) -> IbInventory | ParseFailure:
    """Parse either form the preflight script may return (sysfs lines, else ibstat output)."""
    if re.search(r"^(CA '|ibpanic:|ibwarn:)", text or "", re.MULTILINE):
        return parse_ibstat(text)
    return parse_ib_sysfs(text)


__all__ = [
    "GPU_QUERY_FIELDS",
    "Gpu",
    "GpuQuery",
    "GpuState",
    "IbInventory",
    "IbPort",
    "parse_cuda_version",
    "parse_gpu_query",
    "parse_ib",
    "parse_ib_sysfs",
    "parse_ibstat",
]
