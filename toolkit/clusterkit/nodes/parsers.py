"""Total, pure parsers of the text that node tools print, and the helpers they all share.

Every parser takes text and returns a typed result; none runs a command, and none raises on
bad input: text it cannot read becomes a :class:`ParseFailure` that keeps the raw text, so a
node printing garbage is reported as "could not parse" on that node instead of crashing the
whole preflight.  The formats are those of the real tools (/proc/mounts or ``mount``, ``df -P``, lsmod,
nvidia-smi and InfiniBand in
:mod:`~clusterkit.nodes.device_parsers`); the tests feed them captured text in
``tests/data/preflight/``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from clusterkit.tooltext import ParseFailure, clip, failure, first_line, parse_int


def _tool_error(what: str, text: str, prefixes: tuple[str, ...]) -> ParseFailure | None:
    """A one-line ``tool: message`` error (``df: /x: No such file or directory``), if that is all."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    if len(lines) == 1 and lines[0].startswith(prefixes):
        return ParseFailure(what, lines[0], clip(text), tool_error=True)
    return None


def version_tuple(text: str) -> tuple[int, ...] | None:
    """``"535.104.05"`` -> ``(535, 104, 5)``; None if ``text`` is not a dotted number."""
    m = re.fullmatch(r"\s*([0-9]{1,9}(?:\.[0-9]{1,9}){0,7})\s*", text or "")
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def version_at_least(have: str, need: str) -> bool | None:
    """Compare dotted versions numerically (``"550.54.15" >= "535.104"``); None if unreadable."""
    h, n = version_tuple(have), version_tuple(need)
    if h is None or n is None:
        return None
    width = max(len(h), len(n))
    return h + (0,) * (width - len(h)) >= n + (0,) * (width - len(n))


# ---------------------------------------------------------------------------------------------
# mounts, df
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


# what the ``mount`` command prints (util-linux, busybox): ``SOURCE on MOUNTPOINT type FSTYPE (OPTIONS)``;
# it does not escape spaces, so the mount point runs to the last " type "
_MOUNT_CMD_LINE = re.compile(r"(?P<src>.+?) on (?P<mnt>/.*) type (?P<fs>[^\s()]+) \((?P<opts>[^()]*)\)")


def _mount_line(line: str) -> Mount | None:
    """One line of /proc/mounts (``/etc/mtab``) or of the ``mount`` command; None if neither."""
    parts = line.split()
    if len(parts) == 6 and parts[1].startswith("/") and parts[4].isdigit() and parts[5].isdigit():
        src, mnt, fstype, opts = (_unescape_mount(p) for p in parts[:4])
        return Mount(src, mnt, fstype, tuple(opts.split(",")))
    m = _MOUNT_CMD_LINE.fullmatch(line.strip())
    if m:
        return Mount(m.group("src"), m.group("mnt"), m.group("fs"), tuple(m.group("opts").split(",")))
    return None


def parse_mounts(text: str) -> tuple[Mount, ...] | ParseFailure:
    """Parse /proc/mounts (``source mountpoint fstype options dump pass`` per line), or the
    ``mount`` command's ``source on mountpoint type fstype (options)`` lines (the two may mix)."""
    err = _tool_error("/proc/mounts", text, ("cat:",))
    if err is not None:
        return err
    mounts: list[Mount] = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        mount = _mount_line(line)
        if mount is None:
            return failure("/proc/mounts", f"unexpected line {line.strip()[:80]!r}", text)
        mounts.append(mount)
    if not mounts:
        return failure("/proc/mounts", "no mount entries", text or "")
    return tuple(mounts)


def find_mount(mounts: Iterable[Mount], path: str) -> Mount | None:
    """The mount that serves ``path``: the longest mount point that is ``path`` or a parent of it.

    Later entries win over earlier ones with the same mount point (over-mounts).
    """
    path = "/" + path.strip("/") if path != "/" else "/"
    best: Mount | None = None
    for m in mounts:
        mp = m.mountpoint.rstrip("/") or "/"
        covers = path == mp or mp == "/" or path.startswith(mp + "/")
        if covers and (best is None or len(mp) >= len(best.mountpoint.rstrip("/") or "/")):
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


_DF_ROW_RE = re.compile(
    r"(?P<src>.+?)\s+(?P<total>\d+)\s+(?P<used>\d+)\s+(?P<avail>\d+)\s+(?P<cap>\d+%|-)\s+(?P<mnt>/.*)")


def parse_df(text: str) -> DiskSpace | ParseFailure:
    """Parse ``df -P [-k] PATH`` (header + one row); the block size comes from the header."""
    what = "df -P"
    err = _tool_error(what, text, ("df:",))
    if err is not None:
        return err
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    if len(lines) < 2:
        got = f"got {len(lines)} line(s): {first_line(text or '')!r}"
        return failure(what, f"expected a header and one row, {got}", text or "")
    header = re.match(r"^Filesystem\s+(\d+)-blocks\s", lines[0])
    if not header:
        return failure(what, f"unexpected header {lines[0][:80]!r}", text)
    row = _DF_ROW_RE.fullmatch(lines[-1].strip())
    if not row:
        return failure(what, f"unexpected row {lines[-1].strip()[:80]!r}", text)
    block, total, avail = (parse_int(v, max_digits=24) for v in (header.group(1), row.group("total"),
                                                                 row.group("avail")))
    if block is None or total is None or avail is None:
        return failure(what, f"numbers that are not plain sizes in {lines[-1].strip()[:80]!r}", text)
    return DiskSpace(row.group("src"), row.group("mnt"), total * block, avail * block)


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


# ---------------------------------------------------------------------------------------------
# locked memory, interface addresses, RoCE GIDs
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limit:
    """One ``/proc/<pid>/limits`` row: soft and hard, None meaning unlimited."""

    soft: int | None
    hard: int | None


def parse_memlock(text: str) -> Limit | ParseFailure:
    """The ``Max locked memory`` row of ``/proc/self/limits`` (bytes, or ``unlimited``)."""
    for line in (text or "").splitlines():
        m = re.match(r"^Max locked memory\s+(\S+)\s+(\S+)\s+bytes\s*$", line)
        if m:
            vals = [None if v == "unlimited" else int(v) if v.isdigit() else -1 for v in m.groups()]
            if -1 in vals:
                return failure("/proc/self/limits", f"unreadable locked-memory limit: {line.strip()}", text)
            return Limit(vals[0], vals[1])
    return _tool_error("/proc/self/limits", text, ("cat:",)) or failure(
        "/proc/self/limits", "no 'Max locked memory' row", text)


@dataclass(frozen=True)
class IfAddr:
    """What ``ip -o -4 addr show dev IF`` says of one interface."""

    exists: bool
    addrs: tuple[str, ...]


def parse_ipv4(text: str) -> IfAddr | ParseFailure:
    """The IPv4 addresses of ``ip -o -4 addr show dev IF`` (``3: ib0    inet 10.0.0.17/16 ...``):
    none when the interface has none; ``exists=False`` on iproute2's ``Device "X" does not exist.``"""
    addrs: list[str] = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        if re.match(r'^Device ".*" does not exist\.\s*$', line):
            return IfAddr(False, ())
        m = re.match(r"^\d+:\s+\S+\s+inet\s+(\d{1,3}(?:\.\d{1,3}){3})(?:/\d+)?\s", line)
        if m:
            addrs.append(m.group(1))
        else:
            return failure("ip -o -4 addr show", first_line(line)[:200], text)
    return IfAddr(True, tuple(addrs))


@dataclass(frozen=True)
class Gid:
    """One GID table entry of a port: its type (``RoCE v2``, ``IB/RoCE v1``) and value."""

    hca: str
    port: int
    index: int
    type: str | None
    gid: str | None

    @property
    def label(self) -> str:
        return f"{self.hca} port {self.port} GID {self.index}"

    @property
    def ipv4_mapped(self) -> bool:
        return bool(self.gid and self.gid.lower().startswith("0000:0000:0000:0000:0000:ffff:"))


_GID_LINE = re.compile(r"^.*?/sys/class/infiniband/([^/]+)/ports/(\d+)/(gid_attrs/types|gids)/(\d+):(.*)$")


def parse_gids(text: str) -> tuple[Gid, ...] | ParseFailure:
    """``grep -H`` over ``gid_attrs/types/N`` and ``gids/N`` of every port (the sysfs the
    kernel's ``show_gids`` reads); an unset entry has no type (the kernel refuses the read)."""
    found: dict[tuple[str, int, int], dict[str, str]] = {}
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        m = _GID_LINE.match(line)
        if not m:
            return failure("GID sysfs", f"unexpected line: {line.strip()[:120]}", text)
        hca, port, kind, index, value = m.groups()
        found.setdefault((hca, int(port), int(index)), {})["type" if kind.startswith("gid_attrs") else "gid"] = \
            value.strip()
    return tuple(Gid(h, p, i, v.get("type"), v.get("gid")) for (h, p, i), v in sorted(found.items()))


__all__ = [
    "DiskSpace",
    "Gid",
    "IfAddr",
    "Limit",
    "Mount",
    "ParseFailure",
    "find_mount",
    "first_line",
    "parse_df",
    "parse_gids",
    "parse_ipv4",
    "parse_memlock",
    "parse_modules",
    "parse_mounts",
    "version_at_least",
    "version_tuple",
]
