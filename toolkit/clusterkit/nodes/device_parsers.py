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

from clusterkit.nodes.ib_parsers import IbInventory, IbPort, parse_ib, parse_ib_sysfs, parse_ibstat
from clusterkit.nodes.parsers import version_tuple
from clusterkit.tooltext import ParseFailure, clip, failure, first_line, parse_int

__all__ = ["GPU_QUERY_FIELDS", "Gpu", "GpuQuery", "GpuState", "IbInventory", "IbPort", "parse_cuda_version",
           "parse_gpu_query", "parse_ib", "parse_ib_sysfs", "parse_ibstat"]

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
