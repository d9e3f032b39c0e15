"""A job's log files in its run directory, and their last lines."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from clusterkit.safefile import is_real_dir, is_regular_file, open_regular, read_capped

if TYPE_CHECKING:
    from clusterkit.scheduler.records import JobRecord

LOG_SUFFIXES = (".out", ".err", ".log")
LOG_MAX_BYTES = 256 * 2**20  # one log file read whole (`logs JOB`) is cut here


class LogTail(TypedDict):
    path: str
    tail: list[str]


def log_files(rec: JobRecord) -> list[Path]:
    """The job's log files in its run directory: the batch log first, then per node / rank.

    Matches files in the run directory and its ``logs/`` whose name holds the job id as a
    whole number (``slurm-123.out``, ``123.node1.out``, ``123.rank3.out``, ``123_0_log.err``).
    Only regular files count: a symlink (or a ``logs`` that is one) could point anywhere outside
    the run directory, and a FIFO would hang whoever reads it.
    """
    token = re.compile(rf"(^|[^0-9]){re.escape(rec.job_id)}([^0-9]|$)")
    run_dir = Path(rec.run_dir)
    found = [p for d in (run_dir, run_dir / "logs") if is_real_dir(d) for p in d.iterdir()
             if p.suffix in LOG_SUFFIXES and token.search(p.name) and is_regular_file(p)]

    def order(p: Path) -> tuple[int, str]:
        main = p.name.startswith("slurm-") or p.name.startswith(f"{rec.job_id}_0_log")
        return (0 if main else 1, _natural(p.name))

    return sorted(found, key=order)


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
