"""py-spy's view of a rank on a stall: the file names, reading what py-spy printed, and the
flight recorder's on-demand pipe names (docs/architecture.md §3, "Watching a run").

On a stall the supervisor runs ``py-spy dump --pid <rank pid> --nonblocking --full-filenames``
on each node for that node's ranks (:mod:`clusterkit.supervise.spynode`), where py-spy is
installed; each rank's pid and node come from the header of its faulthandler stack file
(:mod:`clusterkit.stackdump`).  py-spy reads the rank's memory from outside: it answers for a
rank that is stopped, or hung where its own signal handler cannot run, and shows the frames of a
rank stuck inside a collective.  Each dump goes beside the stack files, into
``<job>.progress.pyspy.rank<R>``: a header line of ours, then py-spy's text.

:func:`parse` reads py-spy's text leniently: at most :data:`MAX_BYTES` (the tail), control
characters dropped, lines that are no thread or frame line skipped; it gives the same
:class:`clusterkit.stackdump.Dump` the faulthandler dumps give, so the same judging
(:func:`clusterkit.stackdump.behind`, :func:`~clusterkit.stackdump.summary`) applies.
"""

from __future__ import annotations

import re
from pathlib import Path

from clusterkit import jobfiles, stackdump
from clusterkit.nofollow import read_regular

SUFFIX = jobfiles.PROGRESS.suffix + jobfiles.PYSPY + jobfiles.RANK
MAX_BYTES = 256 << 10
#: Where each rank's flight-recorder pipe is (node-local; torch appends ``<rank>.pipe``).
FR_PIPE = "/tmp/ck-fr-pipe-{job}.r{restart}.rank"
#: The flight recorder's dump file on a node's own disk (the site's ``logs.node_local_dir``), above the
#: site's ``logs.debug_max_nodes``; torch appends the rank.  Copied back as ``fr-<job>.r<restart>.rank<R>``.
FR_LOCAL = "clusterkit-fr-{job}.r{restart}.rank"
#: ``--debug``'s NCCL file on a node's own disk above that limit (without ``--debug-nodes``), before
#: ``.<host>.<pid>.log``; copied back as ``nccl-<job>.r<restart>.<node>.<pid>.log``.
NCCL_LOCAL = "clusterkit-nccl-{job}.r{restart}"
_HEAD = re.compile(r"# clusterkit py-spy dump: rank=(\d{1,7}) host=([A-Za-z0-9._-]{1,64}) pid=(\d{1,10}) "
                   r"thread=0x([0-9a-f]{1,16}) asked=(\d{1,12}(?:\.\d{1,9})?)")
_THREAD = re.compile(r'Thread (0x[0-9A-Fa-f]{1,16}|\d{1,10})(?: \(0x[0-9A-Fa-f]{1,16}\))? \(([a-z+]{1,20})\)'
                     r'(?:: "(.{0,200})")?')
_FRAME = re.compile(r"    (\S.{0,300}?) \((.{1,400}?)(?::(\d{1,9}))?\)")
_NAME = jobfiles.rank_files(jobfiles.PYSPY)


def path(logs: Path, job_id: str, rank: int) -> Path:
    return logs / f"{job_id}{SUFFIX}{rank}"


def head(rank: int, host: str, pid: int, thread: int, asked: float) -> str:
    return f"# clusterkit py-spy dump: rank={rank} host={host} pid={pid} thread=0x{thread:016x} asked={asked:.3f}\n"


def files(logs: Path, job_id: str) -> list[tuple[int, Path]]:
    """The job's py-spy dump files in ``logs``, by rank (at most 4096)."""
    return stackdump.files(logs, job_id, _NAME)


def _frame(m: re.Match[str]) -> str:
    """``file line N in function`` as the stack files word it (a native frame: ``library in function``)."""
    func, where, line = m.group(1), m.group(2), m.group(3)
    return f"{where} line {line} in {func}" if line else f"{where} in {func}"


def parse(text: str, rank: int, host: str = "?", pid: int = 0, thread: int = 0) -> stackdump.Dump:
    """py-spy's ``dump`` text as the rank's dump: the training thread's frames, innermost first.
    The thread is the one whose id is the rank's thread (py-spy prints the pthread id, or the OS
    thread id where it knows it: the pid for the main thread), else ``MainThread``, else the first."""
    text = "".join(c for c in text[-MAX_BYTES:] if c == "\n" or c.isprintable())
    threads: list[tuple[str, str, list[str]]] = []
    for ln in text.splitlines():
        if (t := _THREAD.fullmatch(ln.strip())) is not None:
            threads.append((t.group(1), t.group(3) or "", []))
        elif threads and len(threads[-1][2]) < stackdump.MAX_FRAMES and (f := _FRAME.fullmatch(ln.rstrip())):
            threads[-1][2].append(_frame(f))
    ids = {str(pid), f"0x{thread:x}"} if pid else set()

    def key(t: tuple[str, str, list[str]]) -> int:
        return 0 if t[0].lower() in ids else 1 if t[1] == "MainThread" else 2

    pick = min(threads, key=key) if threads else None
    return stackdump.Dump(rank, host, tuple(pick[2]) if pick else ())


def read(file: Path, rank: int) -> stackdump.Dump | None:
    """A py-spy dump file of ours: the rank's dump, ``asked`` from its header; None without one."""
    data = read_regular(file, MAX_BYTES, tail=True)
    if data is None:
        return None
    text = data.decode("utf-8", errors="replace")
    first, _, rest = text.partition("\n")
    m = _HEAD.fullmatch(first.strip())
    if m is None or int(m.group(1)) != rank:
        return None
    got = parse(rest, rank, m.group(2), int(m.group(3)), int(m.group(4), 16))
    return stackdump.Dump(got.rank, got.host, got.frames, float(m.group(5)))


def read_all(logs: Path, job_id: str, since: float = 0.0) -> list[stackdump.Dump]:
    """The job's py-spy dumps asked at or after ``since`` (unix seconds)."""
    out = []
    for rank, file in files(logs, job_id):
        got = read(file, rank)
        if got is not None and (got.asked or 0.0) >= since:
            out.append(got)
    return out
