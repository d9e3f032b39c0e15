"""The files a job script writes and clusterkit reads back for a job's end: one place for their
names and their reading, which the records, both schedulers and the array views share (so
none of them imports another for it)."""

from __future__ import annotations

import re
from pathlib import Path

from clusterkit import jobfiles
from clusterkit.safefile import read_capped


def result_file(run_dir: Path, job_id: str) -> Path:
    """The result file of ``job_id`` in ``run_dir``: one line, the job script's exit status."""
    return jobfiles.RESULT.path(run_dir, job_id)


def read_result_file(path: Path) -> int | None:
    """The exit status in a result file, or None when there is none (yet) or it is garbled."""
    try:  # the job writes it: a FIFO, a symlink or a huge file there is not a result
        data, cut = read_capped(path, 64, follow_symlinks=False)
        text = "" if cut else data.decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if re.fullmatch(r"-?\d{1,3}", text) else None


#: the most teardown steps a record is read for (each a line ``N STATUS``)
MAX_TEARDOWN_STEPS = 100


def read_teardown_file(run_dir: Path, job_id: str) -> list[tuple[int, int]]:
    """The job's teardown steps run so far, ``(step, status)``, from ``<job id>.teardown`` (the
    supervisor's, supervise/teardown.py); empty where there is none or it is not that file's
    form (a regular file, at most 100 lines ``N STATUS``, steps 1, 2, ... in order)."""
    try:
        data, cut = read_capped(jobfiles.TEARDOWN.path(run_dir, job_id), 16 * MAX_TEARDOWN_STEPS, follow_symlinks=False)
        lines = [] if cut else data.decode("ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for n, line in enumerate(lines, 1):
        m = re.fullmatch(r"(\d{1,3}) (\d{1,3})", line)
        if m is None or int(m[1]) != n or int(m[2]) > 255:
            return []
        out.append((n, int(m[2])))
    return out
