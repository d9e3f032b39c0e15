"""A job for the run account's end-to-end test: rank 0 reports each of STEPS steps at once
(``min_interval_s=0``), a checkpoint save at step 4, and sleeps STEP_S between steps, so the
job lasts at least STEPS x STEP_S seconds and its last progress line is step STEPS.  An argument
sets another STEP_S; a second, a path (``%j``: the Slurm job id), holds the job after step
HOLD_AT (past the save) until that path exists, at most 600 s: a job that must still run when a
test acts on it runs until the test says so, not for a guess of how long the test takes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import clusterkit

STEPS = 8
STEP_S = 0.25
HOLD_AT = 5


def main() -> int:
    pause = float(sys.argv[1]) if len(sys.argv) > 1 else STEP_S
    hold = Path(sys.argv[2].replace("%j", os.environ.get("SLURM_JOB_ID", ""))) if len(sys.argv) > 2 else None
    for step in range(1, STEPS + 1):
        time.sleep(pause)
        if step == 4:
            clusterkit.progress(step, saving=True, min_interval_s=0)
        clusterkit.progress(step, min_interval_s=0)
        if step == HOLD_AT and hold is not None:
            deadline = time.monotonic() + 600
            while not hold.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
