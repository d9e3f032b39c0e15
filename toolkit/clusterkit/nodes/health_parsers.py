"""Total parsers of the deeper health sections: the kernel log's Xid lines, ``nvidia-smi nvlink
-s``, two reads of ``nvidia-smi nvlink -e`` and two reads of the InfiniBand error counters.
None runs anything, none raises; text they cannot read is a
:class:`~clusterkit.tooltext.ParseFailure` with the raw text kept.
What each Xid means is :mod:`clusterkit.nodes.xid`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusterkit.tooltext import ParseFailure, failure, first_line, parse_int

_MAX_LINES = 100_000

# ---------------------------------------------------------------------------------------------
# the kernel log: NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.
# ---------------------------------------------------------------------------------------------

# The driver's line; older drivers print the address without "PCI:".  "SXid" (NVSwitch) lines
# do not match: the word before "Xid" must be "NVRM:".
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)\): "
                  r"(\d{1,5})(?:,\s*(.*))?\s*")
# what the node script prints first: which log it read, or why it could read none
_SOURCE = re.compile(r"kernel log: (dmesg|journalctl)")
_UNREADABLE = re.compile(r"kernel log unreadable: ?(.*)")


@dataclass(frozen=True)
class XidEvent:
    pci: str  # as printed, lower case: 0000:3b:00
    xid: int
    text: str  # the rest of the line (bounded)


@dataclass(frozen=True)
class KernelLog:
    """The Xid lines of the kernel log since boot.  ``source`` None: the log could not be read."""

    source: str | None
    events: tuple[XidEvent, ...] = ()
    why: str = ""  # why it could not be read
    unreadable: tuple[str, ...] = ()  # "NVRM: Xid" lines not in the driver's format (bounded)


def parse_xid_log(text: str) -> KernelLog:
    """The ``NVRM: Xid`` lines of a kernel log (dmesg or ``journalctl -k``; every other line is
    skipped), after the node script's optional ``kernel log: SOURCE`` line.  Any text is a log:
    an Xid line in no known form is kept as unreadable, never a failure of the whole log."""
    source: str | None = "dmesg"
    events: list[XidEvent] = []
    unreadable: list[str] = []
    lines = text.splitlines()[:_MAX_LINES]
    for i, line in enumerate(lines):
        if i == 0 and (m := _SOURCE.fullmatch(line.strip())):
            source = m.group(1)
            continue
        if i == 0 and (u := _UNREADABLE.fullmatch(line.strip())):
            return KernelLog(None, why=u.group(1)[:200] or "no reason given")
        m = _XID.search(line)
        xid = parse_int(m.group(2), max_digits=5) if m else None
        if m and xid is not None:
            events.append(XidEvent(m.group(1).lower(), xid, (m.group(3) or "").strip()[:300]))
        elif "NVRM: Xid" in line and len(unreadable) < 20:
            unreadable.append(line.strip()[:200])  # kept for the report, never a reason to stop reading
    return KernelLog(source, tuple(events), unreadable=tuple(unreadable))


# ---------------------------------------------------------------------------------------------
# nvidia-smi nvlink -s
# ---------------------------------------------------------------------------------------------

_NVLINK_GPU = re.compile(r"GPU (\d{1,3}): (.*?)(?: \(UUID: .*\))?")
_NVLINK_LINK = re.compile(r"Link (\d{1,3}): (.*)")
_NVLINK_ALL_INACTIVE = re.compile(r".*all links are in ?active.*", re.IGNORECASE)


@dataclass(frozen=True)
class NvLink:
    link: int
    state: str  # "up", "inactive" or the text as printed when it is neither
    speed: str = ""  # "25.781 GB/s"


@dataclass(frozen=True)
class GpuLinks:
    index: int
    name: str
    links: tuple[NvLink, ...]

    @property
    def active(self) -> int:
        return sum(1 for link in self.links if link.state == "up")


@dataclass(frozen=True)
class NvlinkStatus:
    gpus: tuple[GpuLinks, ...]


def parse_nvlink(text: str) -> NvlinkStatus | ParseFailure:
    """``nvidia-smi nvlink -s``: each GPU's links, up (a speed) or ``<inactive>``.  Empty output
    is a node without NVLink (a PCIe GPU prints nothing)."""
    gpus: list[tuple[int, str, list[NvLink]]] = []
    for line in text.splitlines()[:_MAX_LINES]:
        s = line.strip()
        if not s:
            continue
        if (g := _NVLINK_GPU.fullmatch(s)) and (index := parse_int(g.group(1), max_digits=3)) is not None:
            gpus.append((index, g.group(2), []))
        elif gpus and (k := _NVLINK_LINK.fullmatch(s)) and (n := parse_int(k.group(1), max_digits=3)) is not None:
            value = k.group(2).strip()
            if value.lower() in ("<inactive>", "inactive"):
                gpus[-1][2].append(NvLink(n, "inactive"))
            elif re.fullmatch(r"[0-9.]+ ?[GM]B/s", value):
                gpus[-1][2].append(NvLink(n, "up", value))
            else:
                gpus[-1][2].append(NvLink(n, value[:60]))
        elif gpus and _NVLINK_ALL_INACTIVE.fullmatch(s):
            continue  # "... all links are inActive": the GPU's links stay as listed (none)
        else:
            why = "not nvidia-smi nvlink output" if not gpus else "unexpected line"
            return failure("nvidia-smi nvlink -s", f"{why}: {first_line(s)[:200]}", text)
    return NvlinkStatus(tuple(GpuLinks(i, name, tuple(links)) for i, name, links in gpus))


# ---------------------------------------------------------------------------------------------
# InfiniBand error counters, read twice: "read 1", grep -H lines, "read 2", grep -H lines
# ---------------------------------------------------------------------------------------------

#: the counters the section reads (sysfs names; the IB spec's SymbolErrorCounter, LinkDownedCounter,
#: PortRcvErrors): a cable or transceiver going bad raises them
IB_COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors")
_COUNTER_LINE = re.compile(r".*/infiniband/([^/\s]+)/ports/(\d{1,3})/counters/([a-z_]+):(.*)")
_READ = re.compile(r"read ([12])(?: after (\d{1,3}) s)?")

CounterKey = tuple[str, int, str]  # (hca, port, counter)


@dataclass(frozen=True)
class CounterReads:
    """The counters at the first and the second read, ``interval_s`` apart (None: not a number,
    e.g. ``N/A (no PMA)``)."""

    first: dict[CounterKey, int | None]
    second: dict[CounterKey, int | None]
    interval_s: int | None = None


def parse_ib_counters(text: str) -> CounterReads | ParseFailure:
    reads: dict[int, dict[CounterKey, int | None]] = {}
    current: dict[CounterKey, int | None] | None = None
    interval: int | None = None
    for line in text.splitlines()[:_MAX_LINES]:
        s = line.strip()
        if not s:
            continue
        if r := _READ.fullmatch(s):
            current = reads.setdefault(int(r.group(1)), {})
            if r.group(2):
                interval = parse_int(r.group(2), max_digits=3)
            continue
        m = _COUNTER_LINE.fullmatch(s)
        if current is None or m is None:
            return failure("InfiniBand counters", f"unexpected line: {s[:200]}", text)
        port = parse_int(m.group(2), max_digits=3)
        if port is not None:
            current[(m.group(1), port, m.group(3))] = parse_int(m.group(4), max_digits=20)
    if 1 not in reads or 2 not in reads:
        return failure("InfiniBand counters", "the section did not print both reads", text)
    return CounterReads(reads[1], reads[2], interval)


# ---------------------------------------------------------------------------------------------
# nvidia-smi nvlink -e, read twice: "read 1", its output, "read 2 after N s", its output
# ---------------------------------------------------------------------------------------------

# "Link 0: Replay Errors: 0", "Link 0: Recovery Errors: 0", "Link 0: CRC Errors: 0" (the names
# vary with the driver and GPU generation: any "Link N: NAME: VALUE" is a counter)
_NVLINK_COUNTER = re.compile(r"Link (\d{1,3}): ([A-Za-z][A-Za-z0-9 ()/_-]{0,60}?): *(\S.*)")
# nvidia-smi's answer where it has no such report (an old tool, a GPU without NVLink support)
_NVLINK_NO_REPORT = re.compile(r"Invalid combination of input arguments|not supported|No devices were found", re.I)

NvlinkCounterKey = tuple[int, int, str]  # (GPU index, link, counter name as printed)


@dataclass(frozen=True)
class NvlinkErrorReads:
    """Each link's error counters at two reads ``interval_s`` apart (None: not a number).
    ``unreported`` is nvidia-smi's own line where it gave no counters at all."""

    first: dict[NvlinkCounterKey, int | None]
    second: dict[NvlinkCounterKey, int | None]
    interval_s: int | None = None
    unreported: str = ""


def _nvlink_error_read(lines: list[str], what: str, text: str) -> dict[NvlinkCounterKey, int | None] | ParseFailure:
    counters: dict[NvlinkCounterKey, int | None] = {}
    gpu: int | None = None
    for s in lines:
        if (g := _NVLINK_GPU.fullmatch(s)) and (index := parse_int(g.group(1), max_digits=3)) is not None:
            gpu = index
        elif gpu is not None and (c := _NVLINK_COUNTER.fullmatch(s)) and (
                link := parse_int(c.group(1), max_digits=3)) is not None:
            counters[(gpu, link, c.group(2).strip())] = parse_int(c.group(3).strip(), max_digits=20)
        else:
            return failure(what, f"unexpected line: {first_line(s)[:200]}", text)
    return counters


def parse_nvlink_errors(text: str) -> NvlinkErrorReads | ParseFailure:
    """Two reads of ``nvidia-smi nvlink -e`` (``GPU N: NAME (UUID: ...)``, then per link one
    ``Link N: NAME: COUNT`` line per counter; blank lines between links).  A read that is only
    nvidia-smi saying it has no such report gives ``unreported``; empty reads are a node
    without NVLink (nothing to compare)."""
    what = "nvidia-smi nvlink -e"
    reads: dict[int, list[str]] = {}
    current: list[str] | None = None
    interval: int | None = None
    for line in text.splitlines()[:_MAX_LINES]:
        s = line.strip()
        if r := _READ.fullmatch(s):
            current = reads.setdefault(int(r.group(1)), [])
            interval = parse_int(r.group(2), max_digits=3) if r.group(2) else interval
        elif current is None:
            return failure(what, f"not the section's reads: {first_line(s)[:200]}", text)
        elif s:
            current.append(s)
    if 1 not in reads:
        return failure(what, "the section printed no read", text)
    if reads[1] and _NVLINK_NO_REPORT.search(reads[1][0]) and not _NVLINK_GPU.fullmatch(reads[1][0]):
        return NvlinkErrorReads({}, {}, interval, unreported=reads[1][0][:200])
    first = _nvlink_error_read(reads[1], what, text)
    if isinstance(first, ParseFailure):
        return first
    if first and 2 not in reads:
        return failure(what, "the section did not print the second read", text)
    second = _nvlink_error_read(reads.get(2, []), what, text)
    if isinstance(second, ParseFailure):
        return second
    return NvlinkErrorReads(first, second, interval)
