"""A training job with one slow rank (run by tests/progress under torchrun, gloo on CPU).

Every rank does its step's work, then an all-reduce, and reports with
``clusterkit.progress(step, work_s=...)``.  The work is a sleep: 0.02 s per step, and on the
rank given as argv[1] four times that (a node at a quarter of the speed).  Exits non-zero if the
all-reduce is wrong.
"""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist

import clusterkit

STEPS, WORK_S = 30, 0.02


def main() -> int:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    slow = int(sys.argv[1])
    for step in range(1, STEPS + 1):
        t0 = time.perf_counter()
        time.sleep(WORK_S * (4 if rank == slow else 1))
        work = time.perf_counter() - t0
        t = torch.ones(1)
        dist.all_reduce(t)
        if int(t.item()) != dist.get_world_size():
            return 1
        clusterkit.progress(step, work_s=work)
    dist.barrier()
    dist.destroy_process_group()
    print(f"straggler job rank {rank} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
