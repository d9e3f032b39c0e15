"""A training job that reports its progress (run by tests/progress under torchrun, gloo on CPU).

Every rank steps through STEPS steps with an all-reduce each and calls ``clusterkit.progress``;
at step 6 it marks a checkpoint save (``saving=True``), writes the checkpoint to
CK_CHECKPOINT_DIR, then reports again.  Rank 1 reports step numbers 1000 higher, so a line
from any rank but 0 would show.  Exits non-zero if the all-reduce is wrong.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

import clusterkit

STEPS = 10


def main() -> int:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    offset = 1000 if rank == 1 else 0
    ckpt = os.path.join(os.environ["CK_CHECKPOINT_DIR"], f"rank{rank}.pt")
    for step in range(1, STEPS + 1):
        t = torch.ones(1)
        dist.all_reduce(t)
        if int(t.item()) != dist.get_world_size():
            return 1
        if step == 6:
            clusterkit.progress(step + offset, saving=True)
            torch.save({"step": step}, ckpt)
        clusterkit.progress(step + offset)
    dist.barrier()
    dist.destroy_process_group()
    print(f"progress job rank {rank} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
