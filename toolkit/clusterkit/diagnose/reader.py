"""Streamed reading of log files: a file is read in chunks, never whole, and only the lines
that match some signature are decoded and looked at.

One pattern (every signature of the catalogue, alternated) finds the candidate lines; RE2
(``google-re2``, a dependency) scans with a DFA at close to ``grep`` speed and without the GIL,
so a few files are read at once.  Python's ``re`` stands in where RE2 cannot be imported, at
about 1 MB/s on this pattern.  Memory stays bounded: one chunk per thread, a capped number of
findings per file, counters for the cascade.
"""

from __future__ import annotations

import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from clusterkit.diagnose import catalogue, lines, marks, tangled
from clusterkit.diagnose.names import expand as expand  # re-exported: doctor walks directories with it
from clusterkit.diagnose.names import name_facts
from clusterkit.safefile import open_regular, skip_hole

try:  # a dependency; the fallback keeps doctor working where the wheel cannot be installed
    import re2 as _fast_re
except ImportError:  # pragma: no cover - depends on the environment
    _fast_re = None

CHUNK = 1 << 20
# The most of one file doctor reads (from its start): a job can leave a sparse terabyte
# (`truncate -s 1T`); the report lists every file cut there.
FILE_MAX_BYTES = 4 << 30
MAX_FINDINGS = 200          # per file and category: more only adds to the counts
MAX_TEXT = 400              # characters of a line kept as evidence
BLOCK_BYTES = 2048          # torchrun's Root Cause block fits in this
_KEEP_CASCADE = {"nccl-timeout": MAX_FINDINGS, "srun-terminated": MAX_FINDINGS, "connection-reset": 1}
_BACK_LINES = 64            # how far up to look for the time of a line that has none

# the fields of a Root Cause entry, also as pasted copies mangle them ("rank2 (local rank: 2)exitcode: -9")
_ROOT_FIELDS = re.compile(r"time\s*:\s*(\S+)|host\s*:\s*(\S+)"
                          r"|\brank\s*:?\s*(\d{1,9})(?: ?\(local[ _]rank: (\d{1,9})\))?"
                          r"|exitcode\s*:\s*(-?\d{1,9})")
_SEQ = re.compile(r"SeqNum=(\d{1,9})")
_PG = re.compile(r"\[PG (?:ID )?(\d{1,9})")
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d{1,9})\]:")
WRAP_WIDTH = 80   # a line this long, followed by one that starts mid-word, was wrapped by a terminal
_WORKER_EXIT = re.compile(catalogue.WORKER_EXIT)
_SRUN_EXIT = re.compile(r"srun: error: (\S+): tasks? ([0-9,-]+): Exited with exit code (\d{1,9})")
_RESTART = re.compile(r"clusterkit: job \d+ on \S+ \(restart (\d{1,9}) of at most \d+\)")


def _compile_trigger() -> Any:
    pattern = catalogue.trigger_pattern()
    if _fast_re is not None:
        opts = _fast_re.Options()
        opts.never_nl = False
        opts.posix_syntax = False
        opts.one_line = False
        return _fast_re.compile(b"(?m)" + pattern.encode(), options=opts)
    return re.compile(pattern.encode(), re.M)


TRIGGER = _compile_trigger()
ENGINE = "re2" if _fast_re is not None else "re"


@dataclass
class Finding:
    """One log line that matched a signature."""

    category: str
    cascade: str | None
    slurm: bool
    time: float | None
    node: str | None
    rank: int | None
    local_rank: int | None
    path: str
    lineno: int
    text: str
    restart: int = 0
    seq: int | None = None
    pg: str | None = None     # the process group a watchdog line names
    task: int | None = None   # the srun task the line names
    group_rank: tuple[str, int] | None = None  # (process group, rank in it) where no global rank is known

    @property
    def where(self) -> str:
        return f"{self.path}:{self.lineno}"


@dataclass
class RootCause:
    """torchrun's "Root Cause (first observed failure)" entry of one node agent."""

    time: float | None
    node: str | None
    rank: int | None
    local_rank: int | None
    exitcode: int | None
    path: str
    lineno: int
    restart: int = 0


@dataclass
class TaskExit:
    """``srun: error: node2: task 5: Exited with exit code 1``."""

    node: str
    tasks: str
    code: int
    path: str
    lineno: int
    restart: int = 0


@dataclass
class FileScan:
    """What one file holds, split by restart where the file says which restart wrote it."""

    path: str
    node: str | None = None
    rank: int | None = None
    findings: list[Finding] = field(default_factory=list)
    root_causes: list[RootCause] = field(default_factory=list)
    task_exits: list[TaskExit] = field(default_factory=list)
    worker_exits: list[Finding] = field(default_factory=list)
    cascade: Counter[tuple[int, str]] = field(default_factory=Counter)
    cascade_ranks: dict[tuple[int, str], set[int]] = field(default_factory=dict)
    restarts: set[int] = field(default_factory=set)
    success: set[int] = field(default_factory=set)
    clean_exit: set[int] = field(default_factory=set)  # restarts whose processes printed torch's normal-exit warning
    bytes_read: int = 0
    cut: bool = False  # the file held more than FILE_MAX_BYTES; the rest was not read
    error: str | None = None
    kept: Counter[tuple[int, str]] = field(default_factory=Counter)


def _rank(scan: FileScan, f: lines.LineFacts) -> int | None:
    """What a file is outranks what a line in it claims: in a per-rank file (``123.r0.rank5.out``)
    every line is that rank's, whatever its prefix says; elsewhere the line's prefix names it."""
    return scan.rank if scan.rank is not None else f.rank


def _node(scan: FileScan, f: lines.LineFacts, slurm: bool) -> str | None:
    """The node of srun's per-node file (``123.r0.node4.out``), whatever a line in it claims; Slurm's own messages
    (``srun: error: Node failure on node4``) name their node in the batch log, never in a rank's file."""
    return f.node or scan.node if slurm and scan.rank is None and scan.node in (None, "sbatch") else scan.node or f.node


@dataclass
class _Cursor:
    """Where the scan of one file stands (line numbers, the last time seen, the restart)."""

    scan: FileScan
    year: int
    restart: int
    lineno: int = 1           # line number at the start of the current chunk
    last_time: float | None = None
    # the time known at a position of the current chunk (the last hit): looking up for the
    # time of the next hit stops there, so a log with many hits costs no more than one pass
    mark_pos: int = 0
    mark_time: float | None = None
    prompt_host: str | None = None  # the host of the last shell prompt: the output below it is that host's
    # findings with no time above them: they take the first time that follows (an upper bound)
    pending: list[Finding] = field(default_factory=list)

    def settle(self, when: float | None) -> None:
        if when is None or not self.pending:
            return
        for f in self.pending:
            f.time = when
        self.pending.clear()


# files scanned at once: RE2 matches without the GIL, so a job's many rank logs share the cores
SCAN_THREADS = min(4, os.cpu_count() or 1) if _fast_re is not None else 1


def scan_files(paths: Sequence[Path], progress: Callable[[int], None] | None = None) -> list[FileScan]:
    """:func:`scan_file` for each path, a few at a time; the scans come back in the paths' order.
    Memory stays bounded: each thread holds one chunk."""
    if SCAN_THREADS <= 1 or len(paths) <= 1:
        return [scan_file(p, progress) for p in paths]
    tick = progress
    if progress is not None:
        lock = threading.Lock()

        def tick_locked(n: int) -> None:
            with lock:
                progress(n)
        tick = tick_locked
    with ThreadPoolExecutor(max_workers=SCAN_THREADS) as pool:
        return list(pool.map(lambda p: scan_file(p, tick), paths))


def scan_file(path: Path, progress: Callable[[int], None] | None = None) -> FileScan:
    """Read ``path`` in chunks and collect its findings; never raises for a bad file."""
    restart, node, rank = name_facts(path)
    scan = FileScan(path=str(path), node=node, rank=rank)
    try:  # a FIFO or a device in a logs directory would hang the read or never end it
        fh = open_regular(path)
        st = os.fstat(fh.fileno())
    except OSError as exc:
        scan.error = f"{path}: {exc.strerror or exc}"
        return scan
    cur = _Cursor(scan, datetime.fromtimestamp(st.st_mtime, tz=timezone.utc).year, restart or 0)
    scan.restarts.add(cur.restart)
    with fh:
        carry = b""
        while True:
            try:
                data = fh.read(min(CHUNK, FILE_MAX_BYTES - scan.bytes_read)) if skip_hole(fh) else b""  # holes: none
                if not data and scan.bytes_read >= FILE_MAX_BYTES:
                    scan.cut = bool(fh.read(1))  # more there than doctor reads of one file
            except OSError as exc:
                scan.error = f"{path}: read failed after {scan.bytes_read} bytes: {exc.strerror or exc}"
                break
            scan.bytes_read += len(data)
            if progress is not None:
                progress(len(data))
            eof = not data
            buf = carry + data
            if not buf:
                break
            cut = len(buf) if eof else buf.rfind(b"\n") + 1
            if cut == 0:  # a chunk without a newline (binary junk): take it as it is
                cut = len(buf)
            cur.mark_pos, cur.mark_time = 0, cur.last_time
            done, lines_done = _scan_chunk(cur, buf, cut, eof)
            cur.lineno += lines_done
            cur.last_time = _time_before(buf, done, cur) or cur.last_time
            cur.settle(cur.last_time)
            carry = buf[done:]
            if eof:
                break
    return scan


def _scan_chunk(cur: _Cursor, buf: bytes, cut: int, eof: bool) -> tuple[int, int]:
    """Handle every trigger hit in ``buf[:cut]``; returns how far the chunk was consumed and how
    many lines that was (each byte is counted once: counting newlines is a good part of the scan)."""
    counted, lines_seen = 0, 0
    last_start = -1
    for m in TRIGGER.finditer(buf, 0, cut):
        # a terminal line is what lies between newlines or carriage returns (progress bars
        # rewrite their line with \r, and the next tool's line starts after the last one)
        nl = buf.rfind(b"\n", 0, m.start()) + 1
        start = max(nl, buf.rfind(b"\r", nl, m.start()) + 1)
        if start == last_start:
            continue  # one line, several hits
        last_start = start
        end = _line_end(buf, m.start(), cut)
        lines_seen += buf.count(b"\n", counted, start)
        counted = start
        text = buf[start:min(end, start + 64 * 1024)].decode("utf-8", errors="replace").rstrip("\r")
        if catalogue.is_root_cause(text) and not eof and cut - end < BLOCK_BYTES and start > 0:
            return start, lines_seen  # the summary block is cut by the chunk's end: read it with the next chunk
        _handle_line(cur, text, buf, start, end, cur.lineno + lines_seen)
    return cut, lines_seen + buf.count(b"\n", counted, cut)


def _line_end(buf: bytes, pos: int, cut: int) -> int:
    nl = buf.find(b"\n", pos, cut)
    nl = cut if nl < 0 else nl
    cr = buf.find(b"\r", pos, nl)
    return nl if cr < 0 else cr


def _time_before(buf: bytes, pos: int, cur: _Cursor, floor: int = 0) -> float | None:
    """The time of the last line before ``pos`` that has one (looking a few lines up, not past ``floor``)."""
    end = pos
    for _ in range(_BACK_LINES):
        if end <= floor:
            return None
        start = buf.rfind(b"\n", 0, max(0, end - 1)) + 1
        line = buf[start:end].decode("utf-8", errors="replace")
        t = lines.line_time(line, cur.year)
        if t is not None:
            return t
        end = start
    return None


def _handle_line(cur: _Cursor, text: str, buf: bytes, start: int, end: int, lineno: int) -> None:
    scan = cur.scan
    m = _RESTART.search(text)
    if m:
        cur.restart = int(m.group(1))
        scan.restarts.add(cur.restart)
        return
    if catalogue.is_success(text):
        scan.success.add(cur.restart)
        return
    host = marks.prompt_host(text)
    if host is not None:
        cur.prompt_host = host or None
        return
    if marks.is_clean_exit(text):
        scan.clean_exit.add(cur.restart)
        return
    f = lines.facts(text, cur.year)
    if f.rank is None and f.local_rank is None and text[:1].islower():
        f = _wrapped(f, buf, start)
    when = f.time
    if when is None:
        when = _time_before(buf, start, cur, cur.mark_pos)
        when = cur.mark_time if when is None else when
    cur.mark_pos, cur.mark_time = end, when
    cur.settle(when)
    if catalogue.is_root_cause(text):
        _root_cause(cur, buf, end, lineno)
        return
    m = _SRUN_EXIT.search(text)
    if m:
        scan.task_exits.append(TaskExit(m.group(1), m.group(2), int(m.group(3)), scan.path, lineno, cur.restart))
        return
    # ranks sharing one stream that raised at once write one line in each other's pieces
    message, copies = tangled.untangle(lines.strip_prefix(text))
    if copies > 1:
        text = message
    sig = catalogue.classify(message)
    if sig is None:
        if _WORKER_EXIT.search(text) and len(scan.worker_exits) < MAX_FINDINGS:
            scan.worker_exits.append(Finding(
                category="unknown", cascade=None, slurm=False, time=when, node=scan.node or f.node,
                rank=_rank(scan, f), local_rank=f.local_rank, path=scan.path,
                lineno=lineno, text=text[:MAX_TEXT], restart=cur.restart))
        return
    rank = _rank(scan, f)
    if sig.cascade:
        key = (cur.restart, sig.cascade)
        scan.cascade[key] += 1
        if rank is not None:
            scan.cascade_ranks.setdefault(key, set()).add(rank)
        # watchdog timeouts and srun's terminations locate the rank behind; the first closed
        # connection of a file tells a rendezvous error that follows it from a cause (verdict)
        keep = _KEEP_CASCADE.get(sig.cascade, 0)
        if scan.kept[key] >= keep:
            return
        scan.kept[key] += 1
    else:
        key = (cur.restart, sig.category)
        if scan.kept[key] >= MAX_FINDINGS:
            return
        scan.kept[key] += 1
    seq = _SEQ.search(text)
    pg = _PG.search(text)
    finding = Finding(
        category=sig.category, cascade=sig.cascade, slurm=sig.slurm, time=when,
        node=_node(scan, f, sig.slurm) or cur.prompt_host, rank=rank, local_rank=f.local_rank, path=scan.path,
        lineno=lineno,
        text=text[:MAX_TEXT], restart=cur.restart, seq=int(seq.group(1)) if seq else None,
        pg=pg.group(1) if pg else None, task=lines.srun_task(text), group_rank=f.group_rank)
    scan.findings.append(finding)
    if when is None:
        cur.pending.append(finding)


def _wrapped(f: lines.LineFacts, buf: bytes, start: int) -> lines.LineFacts:
    """A line that starts mid-word under a long ``[rankN]:`` line is that line's tail, wrapped
    by the terminal it was copied from: it was written by the same rank."""
    if start == 0:
        return f
    prev = buf[buf.rfind(b"\n", 0, start - 1) + 1:start - 1].decode("utf-8", errors="replace")
    m = _RANK_PREFIX.match(prev)
    if not m or len(prev) < WRAP_WIDTH:
        return f
    rank = int(m.group(1))
    return lines.LineFacts(f.time, f.node, rank if prev.startswith("[rank") else None,
                           rank if prev.startswith("[default") else None, f.group_rank)


def _root_cause(cur: _Cursor, buf: bytes, end: int, lineno: int) -> None:
    block = buf[end:end + BLOCK_BYTES].decode("utf-8", errors="replace").splitlines()[:9]
    got: dict[str, str] = {}
    for line in block:
        for m in _ROOT_FIELDS.finditer(line):
            t, host, rank, local, code = m.groups()
            for k, v in (("time", t), ("host", host), ("rank", rank), ("local", local), ("code", code)):
                if v is not None:
                    got.setdefault(k, v)
    when = lines.line_time(got["time"], cur.year) if "time" in got else None
    cur.scan.root_causes.append(RootCause(
        time=when, node=cur.scan.node or got.get("host"),
        rank=int(got["rank"]) if "rank" in got else None,
        local_rank=int(got["local"]) if "local" in got else None,
        exitcode=int(got["code"]) if "code" in got else None,
        path=cur.scan.path, lineno=lineno, restart=cur.restart))
