"""A rank of a small gloo job that can be made to hang (run by tests/progress/test_hang_naming.py).

Each rank steps: a little work, an all-reduce, ``clusterkit.progress(step)``, a short sleep.  When
the file ``<argv[1]>/stuck<rank>`` exists, the rank stays in its loop, alive, before its next
all-reduce (as a rank whose data loader hangs): the other ranks wait in that all-reduce.  When
``<argv[1]>/gil<rank>`` exists, the rank is stuck in one long C call that holds the interpreter's
lock (a regular expression that backtracks for hours): its heartbeat thread stops too.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import clusterkit


def main() -> int:
    gates = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(1, 100_000):
        t = torch.ones(1)
        dist.all_reduce(t)
        clusterkit.progress(step, work_s=0.01)
        time.sleep(0.05)
        while (gates / f"stuck{rank}").exists():
            time.sleep(0.2)
        if (gates / f"gil{rank}").exists():
            re.match(r"(a+)+$", "a" * 64 + "b")
    return 0


if __name__ == "__main__":
    sys.exit(main())
