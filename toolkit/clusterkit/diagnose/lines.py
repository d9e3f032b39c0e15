"""Per-line facts: when a line was written, by which node, by which rank.

Pure functions over one decoded line.  Every format is one the tools really print:

* ISO times anywhere in the line: DeepSpeed / Python logging ``[2026-12-01 15:28:41,123]``,
  slurmstepd ``CANCELLED AT 2026-12-01T15:28:41``, newer NCCL's timestamp;
* torch's glog prefix ``E1201 15:28:41.624000 16605 .../api.py:1002]`` (no year: taken from
  the file's other lines or its modification time);
* torchrun's failure summary ``time : 2026-12-01_15:28:41``;
* syslog ``Dec  1 15:28:41 node5 kernel: ...`` and ``dmesg -T`` ``[Tue Dec  1 15:28:41 2026]``.

Ranks: torchrun's ``[rank3]:`` is the global rank, ``[default3]:`` the local one (its
``--tee`` prefix), and so are its agent's ``failed (exitcode: -9) local_rank: 3`` and DeepSpeed's
``--local_rank=3``; DeepSpeed logs ``[Rank 3]``, torch's watchdog ``[PG 0 Rank 3]``, Open MPI's
``--tag-output`` ``[1,3]<stdout>:``, and srun's ``srun: error: node7: task 3: ...`` names a
task (:func:`srun_task`), a rank only where srun started one task per GPU.  NCCL's
``host:pid:tid [2]`` bracket is the local GPU index, never a rank.

Nodes: NCCL's ``host:pid:tid [dev]`` prefix (also behind another tool's prefix or glued to a
progress bar), UCX's ``[host:pid:tid]``, syslog's host, srun's ``srun: error: node7: ...``,
``slurmstepd-node7:`` and ``*** JOB 42 ON node7 CANCELLED``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}

_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T _](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?")
# torch's C++ logs (c10) write "[E1201 09:24:07.123456789 ProcessGroupNCCL.cpp:616]", its Python ones
# "E1201 09:24:07.123000 5069 .../api.py:1002]"
# torchrun's --tee prefix may stand before torch's own: "[rank0]: [rank0]:[E1201 ..."
_GLOG = re.compile(r"^(?:\[(?:rank|default)\d+\]: ?)*\[?[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{1,9})[ \]]")
_SYSLOG = re.compile(r"^(?:\[\w{3} )?([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d)(?: (\d{4})\])?")
# what may stand before torchrun's prefix: the user's own timestamp ("2025-10-04T15:16:15.735Z [rank0]:")
# or pdsh's / srun --label's host ("node3: [rank2]:")
_LEAD = r"^(?:\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d[.,\dZ+:-]*\]? +|[a-z][a-z0-9-]*\d[\w.-]*: )?"
_RANK = re.compile(_LEAD + r"\[rank(\d{1,9})\]:")
_LOCAL = re.compile(_LEAD + r"\[default(\d{1,9})\]:")
# pdsh's (and clush's) "host: " before a node's kernel log or a rank's line ("node3: [ 1234.5] NVRM: ...");
# a host name has a digit (an exception name has none), and what follows is a log line, not prose
_PDSH_HOST = re.compile(r"^([a-z][a-z0-9-]*\d[\w.-]*): (?:\[|[A-Z][a-z]{2} +\d|NVRM: |kernel: )")
# a monitoring alert that names the host: "Xid errors on instance: ip-26-0-146-100, Error: ..."
_ALERT_HOST = re.compile(r"\bon instance: ([A-Za-z0-9][\w.-]*)")
# Open MPI: "mpirun noticed that process rank 0 with PID 21183 on node host01 exited on signal 9"
_MPI_NOTICED = re.compile(r"noticed that process rank (\d{1,9}) with PID \d+ on node ([A-Za-z0-9][\w.-]*)")
# DeepSpeed's ssh pre-check names the host it could not reach
_SSH_HOST = re.compile(r"\bhost=([A-Za-z0-9][\w.-]*) was not reachable via ssh|Command 'ssh (?:-o \S+ )*"
                       r"([A-Za-z0-9][\w.-]*) hostname'")
# a rank of a process group other than the default one is that group's own: "[PG ID 2 PG GUID 3 Rank 0]"
_GROUP_RANK = re.compile(r"\[PG (?:ID )?(\d{1,9})\b[^\]]*\bRank (\d{1,9})\]")
_DS_RANK = re.compile(r"(?:\[|\bPG (?:GUID )?\S+ )Rank (\d{1,9})\]")
# Open MPI's --tag-output (after --timestamp-output's date, if any): [jobid,rank]<stdout>:
_OMPI = re.compile(r"^(?:\w{3} \w{3} +\d+ [\d:]+ \d{4})?\[\d+,(\d{1,9})\]<std(?:out|err)>:")
_AGENT_LOCAL = re.compile(r"\blocal_rank: (\d{1,9}) \(pid|'--local_rank=(\d{1,9})'")
_SRUN_TASK = re.compile(r"srun: error: [A-Za-z0-9][\w.-]*: task (\d{1,9}): ")
_NCCL_HOST = re.compile(r"(?:^|[\]\s>:])([A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] ")
_UCX_HOST = re.compile(r"\[([A-Za-z][\w.-]*):\d+ *:\d+(?::\d+)?\] ")
_CANCEL_NODE = re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON ([A-Za-z0-9][\w.-]*) CANCELLED")
_SYSLOG_HOST = re.compile(r"(?:^|: )[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d ([A-Za-z0-9][\w.-]*) kernel:")
_SRUN_NODE = re.compile(r"(?:srun|salloc|sbatch): error: (?:Node failure on )?([A-Za-z0-9][\w.-]*)(?:: task|$)")
_STEPD_NODE = re.compile(r"slurmstepd-([A-Za-z0-9][\w.-]*): ")
# one prefix, or torchrun's --tee prefix before torch's own ("[rank0]: [rank0]: KeyError: 'lr'")
_PREFIX = re.compile(_LEAD + r"\[(?:rank|default)\d+\]:(?: ?\[(?:rank|default)\d+\]:)*")


@dataclass(frozen=True)
class LineFacts:
    """What a line says about itself (None where it says nothing)."""

    time: float | None
    node: str | None
    rank: int | None
    local_rank: int | None
    group_rank: tuple[str, int] | None = None   # (process group, rank in it) where no global rank is known


def _epoch(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str | None) -> float | None:
    try:
        t = datetime(y, mo, d, h, mi, s, tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None
    return t + (int(frac) / 10 ** len(frac) if frac else 0.0)


def line_time(line: str, year: int) -> float | None:
    """The line's wall-clock time as seconds since the epoch (read as if UTC, only to order and
    print it: :func:`iso` gives back the time as written, with no zone), or None."""
    m = _GLOG.match(line)
    if m:
        mo, d, h, mi, s, frac = m.groups()
        return _epoch(year, int(mo), int(d), int(h), int(mi), int(s), frac)
    m = _ISO.search(line)
    if m:
        y, mo, d, h, mi, s, frac = m.groups()
        return _epoch(int(y), int(mo), int(d), int(h), int(mi), int(s), frac)
    m = _SYSLOG.match(line)
    if m and m.group(1) in _MONTHS:
        mon, d, h, mi, s, y = m.groups()
        return _epoch(int(y) if y else year, _MONTHS[mon], int(d), int(h), int(mi), int(s), None)
    return None


def line_rank(line: str) -> tuple[int | None, int | None]:
    """(global rank, local rank) from the launcher's prefix or the line's own words."""
    m = _RANK.match(line) or _OMPI.match(line) or _MPI_NOTICED.search(line)
    if m:
        return int(m.group(1)), None
    m = _LOCAL.match(line)
    if m:
        return None, int(m.group(1))
    g = _GROUP_RANK.search(line)
    if g and g.group(1) != "0":
        return None, None  # a group-local rank: :func:`group_rank`
    m = _DS_RANK.search(line)
    if m:
        return int(m.group(1)), None
    m = _AGENT_LOCAL.search(line)
    if m:
        return None, int(m.group(1) or m.group(2))
    return None, None


def group_rank(line: str) -> tuple[str, int] | None:
    """(process group, rank in that group) where a line names a rank of a group other than the
    default one and no global rank (``[PG ID 2 PG GUID 3 Rank 0]`` without ``[rank5]:``)."""
    if _RANK.match(line) or _OMPI.match(line):
        return None
    g = _GROUP_RANK.search(line)
    return (g.group(1), int(g.group(2))) if g and g.group(1) != "0" else None


def srun_task(line: str) -> int | None:
    """The one task srun names in ``srun: error: node7: task 3: ...``."""
    m = _SRUN_TASK.search(line)
    return int(m.group(1)) if m else None


def line_node(line: str) -> str | None:
    """The host a line names as its writer: NCCL's ``host:pid:tid``, syslog, srun's node, ..."""
    for rx in (_ALERT_HOST, _SYSLOG_HOST, _MPI_NOTICED):
        m = rx.search(line)
        if m:
            return m.group(m.lastindex or 1)
    m = _SSH_HOST.search(line)
    if m:
        return m.group(1) or m.group(2)
    for rx in (_NCCL_HOST, _UCX_HOST, _SRUN_NODE, _STEPD_NODE, _CANCEL_NODE, _PDSH_HOST):
        m = rx.search(line)
        if m:
            return m.group(1)
    return None


def facts(line: str, year: int) -> LineFacts:
    """Everything :mod:`lines` knows about ``line``."""
    line = _unquote(line)
    rank, local = line_rank(line)
    return LineFacts(line_time(line, year), line_node(line), rank, local, group_rank(line) if rank is None else None)


def _unquote(line: str) -> str:
    """A line as pasted in Markdown: without the backticks around it (```srun: error: ...```)."""
    stripped = line.strip()
    return stripped.strip("`") if stripped.startswith("`") or stripped.endswith("`") else line


def strip_prefix(line: str) -> str:
    """The line without torchrun's ``[rankN]:`` / ``[defaultN]:`` prefix (both, where ``--tee``'s
    stands before torch's own)."""
    return _PREFIX.sub("", line, count=1)


def iso(t: float | None) -> str | None:
    """``2026-12-01T15:28:41``, the time as the log line wrote it (fractions dropped), or None.
    Log lines name no zone (node-local wall clock), so none is added: no ``Z``."""
    if t is None:
        return None
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
