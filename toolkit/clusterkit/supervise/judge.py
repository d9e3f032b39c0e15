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
