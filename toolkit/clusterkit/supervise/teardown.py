"""The job's teardown steps (``--teardown``, the site's ``job.teardown``): shell commands the
supervisor runs on the batch host once the training has ended for good, whether it succeeded or
not, right before the result is written (docs/architecture.md §3, "The job's own additions").

Each step runs as ``bash -c CMD`` in the job's environment with ``CK_TRAINING_STATUS`` (the
training's exit status) and ``CK_TRAINING_REASON`` (why it ended, where there is more to say);
its output goes to the job's log.  Its status is written to ``<job id>.teardown`` (one line per
step run so far: ``N STATUS``, replaced whole after each step), which ``clusterkit status`` reads
back; a failing step neither stops the next nor changes the training's status or result.  Not run
where Slurm ends the run itself (a requeue, a cancel, the time limit's end): the run goes on
later, or Slurm's end leaves no time.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from clusterkit import jobfiles
from clusterkit.supervise import decide


def run(steps: Sequence[str], status: int, reason: str, run_dir: str, job_id: str, env: Mapping[str, str],
        log: Callable[[str], None]) -> list[tuple[int, int]]:
    """Run ``steps`` in order; each one's (number, status), also written to ``<job id>.teardown``."""
    done: list[tuple[int, int]] = []
    child_env = {**env, "CK_TRAINING_STATUS": str(status), "CK_TRAINING_REASON": reason}
    for n, cmd in enumerate(steps, 1):
        log(f"teardown step {n} of {len(steps)} (the training ended with status {status})")
        try:
            proc = subprocess.run(["bash", "-c", cmd], stdin=subprocess.DEVNULL, env=child_env, check=False)
            rc = decide.exit_status(proc.returncode)
        except OSError as exc:
            log(f"teardown step {n}: cannot run bash: {exc.strerror or exc}")
            rc = 127
        log(f"teardown step {n} of {len(steps)} ended with status {rc}")
        done.append((n, rc))
        _write(jobfiles.TEARDOWN.path(run_dir, job_id), done, log)
    return done


def _write(path: Path, done: list[tuple[int, int]], log: Callable[[str], None]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text("".join(f"{n} {rc}\n" for n, rc in done))
        os.replace(tmp, path)
    except OSError as exc:
        log(f"cannot write {path}: {exc.strerror or exc}")
