"""A data-parallel training loop for the recovery tests (tests/slurm/test_recovery.py).

A real torch DDP loop on CPU (gloo): forward, backward, gradient all-reduce, optimizer step.
Rank 0 saves a checkpoint to ``$CK_CHECKPOINT_DIR/ckpt.pt`` every ``--save-every`` steps; every
rank resumes from it when it is there.  Each rank's batch is drawn from a generator seeded by
(step, rank), so the weights after the last step are the same whatever the run went through,
provided it resumed at a saved step with the same world size: rank 0 prints them at the end.

  --steps N --step-s S     how long it trains
  --resumed-steps N        once resumed from a checkpoint, N steps more and done (default: up to
                           --steps): a test whose first attempt must outlast a fault's handling
                           trains "for ever" (a large --steps) until it is relaunched
  --resumed-step-s S       the sleep per step once resumed from a checkpoint (default: --step-s): a
                           test that faults the first attempt after its save needs no slow steps after
  --gpu-fault-on HOSTS     the rank on each of HOSTS (comma-separated) prints the lines of a real Xid 79 capture
  --gpu-fault-log FILE     (FILE: a doctor corpus file; its lines after ``# ---``) at --fail-step
                           and exits 1, as a rank whose GPU fell off the bus
  --key-error              every rank fails in its own code at --fail-step (a KeyError)
  --oom-on HOST            the rank on HOST joins the memory cgroup --oom-cgroup DIR (made by the
  --oom-cgroup DIR         test, with a memory limit) at --fail-step and allocates memory until the
                           kernel's OOM killer kills it there (SIGKILL)
  --stall-on HOST          the rank on HOST stops itself (SIGSTOP) after --fail-step, in the first
                           attempt only (no checkpoint yet): a rank that stops making progress.  The
                           loop then reports its progress (clusterkit.progress) and takes the job's
                           process-group timeouts (CK_PG_TIMEOUT_START_S, then CK_PG_TIMEOUT_S)
  --hold PATH              after joining the world, every rank says "holding" and waits until PATH
                           exists (at most 600 s) before its first step: a test that must change a
                           node before training starts (a CPU quota) says when, not a guess
  --work N                 each step, every rank first multiplies N 192x192 matrices on one thread
                           (its own work, before the gradient sync; 400: about 60 ms of one CPU) and
                           reports how long that took (clusterkit.progress(step, work_s=...)): a rank
                           on a slow node is a straggler
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import socket
import sys
import time
from pathlib import Path


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--step-s", type=float, default=0.3)
    p.add_argument("--resumed-steps", type=int)
    p.add_argument("--resumed-step-s", type=float)
    p.add_argument("--save-every", type=int, default=3)
    p.add_argument("--fail-step", type=int, default=8)
    p.add_argument("--gpu-fault-on")
    p.add_argument("--gpu-fault-log")
    p.add_argument("--key-error", action="store_true")
    p.add_argument("--stall-on")
    p.add_argument("--oom-on")
    p.add_argument("--work", type=int)
    p.add_argument("--hold")
    p.add_argument("--oom-cgroup")
    # the deepspeed launcher hands every script these (a deepspeed script reads them through
    # deepspeed.add_config_arguments); this loop trains with torch.distributed alone
    p.add_argument("--local_rank", type=int)
    p.add_argument("--deepspeed_config")
    return p.parse_args()


def say(line: str) -> None:
    os.write(sys.stdout.fileno(), f"{line}\n".encode())


def gpu_fault(capture: str) -> int:
    """The capture's lines, as the failing rank's log shows them, then the rank's end."""
    text = Path(capture).read_text(errors="replace")
    body = text.split("# ---\n", 1)[1]
    os.write(sys.stderr.fileno(), body.encode())
    return 1


def run_out_of_memory(cgroup: str) -> None:
    """Join the memory cgroup (only what is allocated from now on counts against its limit) and
    take memory, every page touched, until the kernel's OOM killer ends this process."""
    Path(cgroup, "cgroup.procs").write_text(f"{os.getpid()}\n")
    held = []
    while True:
        block = bytearray(32 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        held.append(block)
        say(f"holding {len(held) * 32} MB")


def main() -> int:
    args = parse()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import clusterkit

    set_timeout = getattr(dist, "set_timeout", None) or dist.distributed_c10d._set_pg_timeout

    watched = args.stall_on is not None or args.work is not None
    start_s = float(os.environ["CK_PG_TIMEOUT_START_S"]) if watched else 60.0
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=start_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    host = socket.gethostname()
    torch.manual_seed(0)
    if args.work:
        torch.set_num_threads(1)   # the same CPU time per step on every rank, whatever the machine's cores
    model = DistributedDataParallel(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ckpt = Path(os.environ["CK_CHECKPOINT_DIR"]) / "ckpt.pt"
    start = 0
    if ckpt.exists():
        state = torch.load(ckpt)
        model.module.load_state_dict(state["model"])
        start = state["step"]
        say(f"rank {rank} on {host} resumed at step {start}")
    if args.hold:
        say(f"rank {rank} on {host} holding")
        deadline = time.monotonic() + 600
        while not os.path.exists(args.hold) and time.monotonic() < deadline:
            time.sleep(0.2)
    end = args.steps if start == 0 or args.resumed_steps is None else min(args.steps, start + args.resumed_steps)
    for step in range(start, end):
        if step == args.fail_step and host in (args.gpu_fault_on or "").split(",") and args.gpu_fault_log:
            return gpu_fault(args.gpu_fault_log)
        if step == args.fail_step and args.oom_on == host and args.oom_cgroup:
            run_out_of_memory(args.oom_cgroup)
        if step == args.fail_step and args.key_error:
            config: dict[str, float] = {}
            say(f"lr {config['lr']}")
        work_s = None
        if args.work:
            began = time.perf_counter()
            m = torch.ones(192, 192) / 192
            for _ in range(args.work):
                m = m @ m
            work_s = time.perf_counter() - began
        gen = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(32, 16, generator=gen)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        say(f"rank {rank}/{world} on {host} step {step} loss {loss.item():.6f}")
        if watched:
            clusterkit.progress(step, work_s=work_s)
            if step == start + 1:   # past the first steps: the short timeout (torchtitan's pattern)
                set_timeout(datetime.timedelta(seconds=float(os.environ["CK_PG_TIMEOUT_S"])))
        if rank == 0 and (step + 1) % args.save_every == 0:
            if watched:
                clusterkit.progress(step + 1, saving=True)
            torch.save({"step": step + 1, "model": model.module.state_dict()}, str(ckpt) + ".tmp")
            os.replace(str(ckpt) + ".tmp", ckpt)
            say(f"rank 0 saved step {step + 1}")
            if watched:
                clusterkit.progress(step + 1)
        if watched and step == args.fail_step and start == 0 and host == args.stall_on:
            say(f"rank {rank} on {host} stops itself after step {step} at {time.time():.3f}")
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(args.step_s if start == 0 or args.resumed_step_s is None else args.resumed_step_s)
    dist.barrier()
    if rank == 0:
        weights = torch.cat([p.detach().flatten() for p in model.module.parameters()])
        say("final weights " + " ".join(f"{w:.6f}" for w in weights.tolist()))
    dist.destroy_process_group()
    say(f"rank {rank} done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
