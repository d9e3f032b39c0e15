"""A two-rank gloo job whose rank 1 stops after three all-reduces (a stuck dataloader), as a
training job would hang.  torch's flight recorder records every collective; gloo has no
watchdog that dumps it on a timeout (NCCL's does), so each rank writes its recorder where
TORCH_FR_DUMP_TEMP_FILE says, with torch's own dump call, where the NCCL watchdog would:
rank 0 when its fourth all-reduce times out, rank 1 where it stalls."""

from __future__ import annotations

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace


def dump(rank: int) -> None:
    with open(os.environ["TORCH_FR_DUMP_TEMP_FILE"] + str(rank), "wb") as fh:
        fh.write(_dump_fr_trace(True, True, False))


def main() -> int:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(sys.argv[1])))
    rank = dist.get_rank()
    t = torch.ones(1024)
    for _ in range(3):
        dist.all_reduce(t)
    dist.broadcast(t, 0)
    if rank == 1:
        dump(rank)                      # stuck here: the others will wait for it
        time.sleep(float(sys.argv[1]) + 5)
        return 0
    try:
        dist.all_reduce(t)
    except RuntimeError as exc:
        print(f"[rank{rank}]: collective timed out: {exc}", file=sys.stderr, flush=True)
        dump(rank)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
