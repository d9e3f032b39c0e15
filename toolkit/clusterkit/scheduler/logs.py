"""A job's log files in its run directory, and their last lines."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from clusterkit.scheduler.records import JobRecord

LOG_SUFFIXES = (".out", ".err", ".log")


class LogTail(TypedDict):
    path: str
    tail: list[str]


def log_files(rec: JobRecord) -> list[Path]:
    """The job's log files in its run directory: the batch log first, then per node / rank.

    Matches files in the run directory and its ``logs/`` whose name holds the job id as a
    whole number (``slurm-123.out``, ``123.node1.out``, ``123.rank3.out``, ``123_0_log.err``).
    """
    token = re.compile(rf"(^|[^0-9]){re.escape(rec.job_id)}([^0-9]|$)")
    run_dir = Path(rec.run_dir)
    found = [p for d in (run_dir, run_dir / "logs") if d.is_dir() for p in d.iterdir()
             if p.is_file() and p.suffix in LOG_SUFFIXES and token.search(p.name)]

    def order(p: Path) -> tuple[int, str]:
        main = p.name.startswith("slurm-") or p.name.startswith(f"{rec.job_id}_0_log")
        return (0 if main else 1, _natural(p.name))

    return sorted(found, key=order)


def _natural(name: str) -> str:
    return re.sub(r"\d+", lambda m: m.group(0).zfill(8), name)


def tail(path: Path, lines: int = 20, max_bytes: int = 256 * 1024) -> list[str]:
    """The last ``lines`` lines of ``path`` (reading at most ``max_bytes`` from its end)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-lines:]


def tails(files: list[Path], lines: int) -> list[LogTail]:
    """``[{"path": ..., "tail": [...]}]`` for each file (the JSON shape ``status`` prints)."""
    return [{"path": str(p), "tail": tail(p, lines)} for p in files]
