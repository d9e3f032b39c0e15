"""A failed chain member asks ``clusterkit doctor`` whether a restart can fix it.

doctor runs as its own process (``clusterkit`` on PATH on the batch host), bounded in time, and
its answer is bounded and reduced to the category's letters (``decide.chain_category``).
"""

from __future__ import annotations

import shutil
import subprocess

from clusterkit.supervise import decide

DOCTOR_TIMEOUT_S = 300.0


def doctor_category(logs_dir: str) -> str | None:
    """doctor's category for the job's logs ("" when it said nothing); None when no clusterkit
    is on PATH to ask."""
    if shutil.which("clusterkit") is None:
        return None
    argv = ["clusterkit", "doctor", "--logs", logs_dir, "--category"]
    try:
        out = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             timeout=DOCTOR_TIMEOUT_S, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = b""
    return decide.chain_category(out[:64].decode("ascii", errors="replace"))


def doctor_on(files: list[str], timeout_s: float, max_out: int) -> tuple[str | None, bool]:
    """doctor's JSON answer on these log files alone (its first ``max_out`` bytes) and whether it
    ran out of time; (None, False) when it could not be run."""
    argv = ["clusterkit", "doctor", "--logs", "--json", *files]
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None, True
    except OSError:
        return None, False
    return proc.stdout[:max_out].decode("utf-8", errors="replace"), False
