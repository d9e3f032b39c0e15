"""A job for the CPU-share tests: each rank reports the CPUs Slurm gave its step, then the ranks
agree on them through a gloo all-reduce, as a training job's first collective would.

Usage: ``python tests/slurm/cpu_share_job.py OUT_DIR``.  Every rank writes
``OUT_DIR/rank<R>.json`` with what it sees (SLURM_CPUS_PER_TASK, OMP_NUM_THREADS, its step);
rank 0 also writes ``OUT_DIR/step.txt`` and ``OUT_DIR/job.txt``: what ``scontrol show step`` and
``scontrol show job`` say about the running step and job.  SIGTERM ends the job cleanly with a
marker, as a preempted training job would.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import FrameType


def _rank_world() -> tuple[int, int]:
    env = os.environ
    if "RANK" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"])
    return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])


def _scontrol(*args: str) -> str:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30).stdout


def main() -> int:
    import torch
    import torch.distributed as dist

    out = Path(sys.argv[1])
    rank, world = _rank_world()

    def on_term(_sig: int, _frame: FrameType | None) -> None:
        (out / f"rank{rank}.terminated").write_text("TERM\n")
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    env = os.environ
    seen = {"rank": rank, "host": socket.gethostname(), "cpus_per_task": env.get("SLURM_CPUS_PER_TASK"),
            "omp_num_threads": env.get("OMP_NUM_THREADS"), "step": f"{env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}"}
    if rank == 0:
        (out / "step.txt").write_text(_scontrol("show", "step", seen["step"]))
        (out / "job.txt").write_text(_scontrol("show", "job", env["SLURM_JOB_ID"]))
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        total = torch.tensor([float(seen["cpus_per_task"] or 0)])
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        seen["cpus_per_task_sum"] = int(total.item())
    finally:
        dist.destroy_process_group()
    (out / f"rank{rank}.json").write_text(json.dumps(seen) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
