"""A job's log files in its run directory, and their last lines."""

from __future__ import annotations

import heapq
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from clusterkit import jobfiles
from clusterkit.safefile import is_real_dir, open_regular, read_capped

if TYPE_CHECKING:
    from clusterkit.scheduler.records import JobRecord

LOG_SUFFIXES = (".out", ".err", ".log")
LOG_MAX_BYTES = 256 * 2**20  # one log file read whole (`logs JOB`) is cut here
MAX_LOG_FILES = 20_000       # log files of one job shown (a 2,500-node job with per-rank files of 8 GPUs)
COPY_CHUNK = 1 << 20


class LogTail(TypedDict):
    path: str
    tail: list[str]


class LogFiles(list[Path]):
    """The log files shown, and how many the run directory holds (``total``: more when cut)."""

    total: int = 0


def log_files(rec: JobRecord) -> LogFiles:
    """The job's log files in its run directory: the batch log first, then per node / rank.

    Matches files in the run directory and its ``logs/`` whose name holds the job id as a
    whole number (``slurm-123.out``, ``123.node1.out``, ``123.rank3.out``, ``123_0_log.err``).
    Only regular files count: a symlink (or a ``logs`` that is one) could point anywhere outside
    the run directory, and a FIFO would hang whoever reads it.  At most :data:`MAX_LOG_FILES`
    (in that order); ``total`` says how many matched.
    """
    token = re.compile(rf"(^|[^0-9]){re.escape(rec.job_id)}([^0-9]|$)")
    run_dir = Path(rec.run_dir)
    found: list[tuple[int, str, Path]] = []
    main = (jobfiles.BATCH_LOG.prefix, f"{rec.job_id}_0_log")
    for d in (run_dir, jobfiles.logs(run_dir)):
        if not is_real_dir(d):
            continue
        with os.scandir(d) as entries:   # the entry's own type: no stat per file (a symlink is no file)
            for e in entries:
                if e.name.endswith(LOG_SUFFIXES) and token.search(e.name) and e.is_file(follow_symlinks=False):
                    found.append((0 if e.name.startswith(main) else 1, e.name, Path(e.path)))
    total = len(found)
    if total > MAX_LOG_FILES:   # order only what can be shown: the batch log, then the lowest names
        found = heapq.nsmallest(MAX_LOG_FILES, found, key=lambda f: (f[0], _natural(f[1])))
    out = LogFiles(p for _, _, p in sorted(found, key=lambda f: (f[0], _natural(f[1]))))
    out.total = total
    return out


def _natural(name: str) -> str:
    return re.sub(r"\d+", lambda m: m.group(0).zfill(8), name)


def tail(path: Path, lines: int = 20, max_bytes: int = 256 * 1024) -> list[str]:
    """The last ``lines`` lines of ``path`` (reading at most ``max_bytes`` from its end)."""
    try:
        with open_regular(path, follow_symlinks=False) as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-lines:]


def read_log(path: Path) -> tuple[str, bool]:
    """The log file as written (decoded leniently), up to :data:`LOG_MAX_BYTES`, and whether
    it was cut there.  Not a regular file (a FIFO, a symlink): OSError."""
    data, cut = read_capped(path, LOG_MAX_BYTES, follow_symlinks=False)
    return data.decode("utf-8", errors="replace"), cut


def tails(files: list[Path], lines: int) -> list[LogTail]:
    """``[{"path": ..., "tail": [...]}]`` for each file (the JSON shape ``status`` prints)."""
    return [{"path": str(p), "tail": tail(p, lines)} for p in files]


def copy_log(path: Path, write: Callable[[bytes], object]) -> bool:
    """The log file as written, up to :data:`LOG_MAX_BYTES`, handed to ``write`` a chunk at a
    time (never whole in memory); whether it held more.  Not a regular file: OSError."""
    left = LOG_MAX_BYTES
    with open_regular(path, follow_symlinks=False) as fh:
        while left > 0:
            data = fh.read(min(COPY_CHUNK, left))
            if not data:
                return False
            write(data)
            left -= len(data)
        return bool(fh.read(1))
