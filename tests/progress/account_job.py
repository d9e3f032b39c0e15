"""A job for the run account's end-to-end test: rank 0 reports each of STEPS steps at once
(``min_interval_s=0``), a checkpoint save at step 4, and sleeps STEP_S between steps, so the
job lasts at least STEPS x STEP_S seconds and its last progress line is step STEPS.  An argument
sets another STEP_S (a job that must still run when a test acts on it)."""

from __future__ import annotations

import sys
import time

import clusterkit

STEPS = 8
STEP_S = 0.25


def main() -> int:
    pause = float(sys.argv[1]) if len(sys.argv) > 1 else STEP_S
    for step in range(1, STEPS + 1):
        time.sleep(pause)
        if step == 4:
            clusterkit.progress(step, saving=True, min_interval_s=0)
        clusterkit.progress(step, min_interval_s=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
