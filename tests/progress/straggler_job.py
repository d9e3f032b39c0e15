"""A training job with one slow rank (run by tests/progress under torchrun, gloo on CPU).

Every rank does its step's work, then an all-reduce, and reports with
``clusterkit.progress(step, work_s=...)``.  ``straggler_job.py RANK sleep``: the work is a sleep of
0.02 s per step, four times that on RANK.  ``straggler_job.py RANK cpu=PCT``: the work is the same
matrix products on every rank, and RANK first moves itself into a cgroup of its own limited to
PCT % of one CPU (cgroup v1 ``cpu.cfs_quota_us``, else v2 ``cpu.max``; root only), a real CPU
limit; it moves back and removes the cgroup at its end.  Exits non-zero if the all-reduce is wrong
or the cgroup cannot be made.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import clusterkit

STEPS, WORK_S = 30, 0.02
V1, V2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/unified")


def limit_cpu(pct: int) -> tuple[Path, Path]:
    """This process into a new cgroup at ``pct`` % of one CPU: (the cgroup, the file to leave it by)."""
    if (V1 / "cpu.cfs_quota_us").exists():
        group = V1 / f"clusterkit-straggler-{os.getpid()}"
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text(str(1000 * pct))
        (group / "cgroup.procs").write_text(str(os.getpid()))   # every thread of it
        return group, V1 / "cgroup.procs"
    root = V2 if (V2 / "cgroup.controllers").exists() else Path("/sys/fs/cgroup")
    group = root / f"clusterkit-straggler-{os.getpid()}"
    group.mkdir()
    (group / "cpu.max").write_text(f"{1000 * pct} 100000")
    (group / "cgroup.procs").write_text(str(os.getpid()))
    return group, root / "cgroup.procs"


def main() -> int:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    slow, how = int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "sleep"
    limited = None
    if how.startswith("cpu=") and rank == slow:
        limited = limit_cpu(int(how[4:]))
        print(f"rank {rank}: limited to {how[4:]} % of one CPU in {limited[0].name}", flush=True)
    a = torch.randn(256, 256)
    try:
        for step in range(1, STEPS + 1):
            t0 = time.perf_counter()
            if how == "sleep":
                time.sleep(WORK_S * (4 if rank == slow else 1))
            else:
                for _ in range(80):   # about 40 ms of one CPU: longer than the limit's 10 ms a period
                    a = torch.tanh(a @ a / 256)
            work = time.perf_counter() - t0
            t = torch.ones(1)
            dist.all_reduce(t)
            if int(t.item()) != dist.get_world_size():
                return 1
            clusterkit.progress(step, work_s=work)
        dist.barrier()
        dist.destroy_process_group()
    finally:
        if limited is not None:
            with contextlib.suppress(OSError):
                limited[1].write_text(str(os.getpid()))
                limited[0].rmdir()
    print(f"straggler job rank {rank} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
