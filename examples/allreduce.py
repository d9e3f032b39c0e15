"""All-reduce smoke test: every rank contributes rank+1, every rank checks the sum.

Runs on CPU with torch.distributed's gloo backend, so it needs no GPU:

    torchrun --standalone --nproc-per-node 2 examples/allreduce.py       # one machine
    clusterkit submit --site local -- python examples/allreduce.py       # the same, via clusterkit
    clusterkit submit --site testbed --stage multi-node --nodes 4 -- python examples/allreduce.py

Under torchrun the rank, world size and rendezvous come from torchrun (env://).  Under
``srun`` without a launcher, they come from Slurm: SLURM_PROCID / SLURM_NTASKS, and
MASTER_ADDR / MASTER_PORT that clusterkit's job script exports (head node, per-job port).

Every rank prints one line ``allreduce rank R/W on HOST: sum=S expected=E ok``; rank 0 then
prints ``allreduce OK: world_size=W sum=S`` (or ``allreduce FAILED``) and the exit status is
non-zero if any rank saw a wrong sum.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys


def rank_and_world() -> tuple[int, int, int]:
    """(rank, local rank, world size) from torchrun's variables, else from Slurm's."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env.get("LOCAL_RANK", "0")), int(env["WORLD_SIZE"])
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return int(env["SLURM_PROCID"]), int(env.get("SLURM_LOCALID", "0")), int(env["SLURM_NTASKS"])
    return 0, 0, 1


def say(line: str) -> None:
    """One write(2) per line: ranks share a log file, and Python's unbuffered text stream
    (torchrun runs workers with ``python -u``) may split text and newline into two writes,
    letting another rank's line land between them."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def check_sum(rank: int, world: int, also_ok: bool = True) -> int:
    """Every rank adds rank+1 in an all-reduce and checks the sum (and ``also_ok``, a check of
    the caller's own); each rank prints its line, rank 0 the summary over all ranks.
    Returns the exit status: 0 when every rank was ok."""
    import torch
    import torch.distributed as dist

    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    expected = world * (world + 1) // 2
    got = int(value.item())
    ok = got == expected and also_ok
    say(f"allreduce rank {rank}/{world} on {socket.gethostname()}: sum={got} expected={expected} "
        f"{'ok' if ok else 'WRONG'}")
    # gather every rank's verdict so rank 0's summary covers them all
    flags = torch.tensor([1.0 if ok else 0.0])
    dist.all_reduce(flags, op=dist.ReduceOp.SUM)
    all_ok = int(flags.item()) == world
    if rank == 0:
        verdict = "OK" if all_ok else "FAILED"
        say(f"allreduce {verdict}: world_size={world} sum={got} expected={expected} "
            f"ranks_ok={int(flags.item())}/{world}")
    return 0 if all_ok else 1


def main() -> int:
    import torch.distributed as dist

    rank, _local_rank, world = rank_and_world()
    for var in ("MASTER_ADDR", "MASTER_PORT"):
        if world > 1 and var not in os.environ:
            print(f"allreduce: {var} is not set: run under torchrun, or under srun from a clusterkit job script",
                  file=sys.stderr)
            return 2
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        return check_sum(rank, world)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
