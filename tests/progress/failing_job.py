"""A job for the run account's failure test: rank 0 reports steps 1-3, a checkpoint save at step
3 that takes SAVE_S (finished: training goes on after it), then steps 4-6, SAVED_AT + LOST_STEPS of them, each
STEP_S apart, and fails (exit 1) with a line that names what failed."""

from __future__ import annotations

import sys
import time

import clusterkit

STEP_S = 0.3
SAVE_S = 0.2     # the save itself (status --run measures it)
SAVED_AT = 3
LOST_STEPS = 3


def main() -> int:
    for step in range(1, SAVED_AT + LOST_STEPS + 1):
        time.sleep(STEP_S)
        if step == SAVED_AT:
            clusterkit.progress(step, saving=True, min_interval_s=0)
            time.sleep(SAVE_S)
        clusterkit.progress(step, min_interval_s=0)
    time.sleep(STEP_S)
    print("RuntimeError: the training loop failed after step 6", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
