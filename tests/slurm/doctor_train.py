"""A small data-parallel training job for `clusterkit doctor`'s tests, told how to fail.

A real torch DDP loop on CPU (gloo): forward, backward, gradient all-reduce, optimizer step,
a checkpoint per step, resume from it after a requeue.  The failure options make it fail the
ways training jobs really fail, so that doctor's verdict is checked against real output:

  --raise-rank R        rank R raises at --fail-step while the others wait in the all-reduce
  --hog-rank R          rank R allocates host memory until Slurm kills the job (past --mem)
  --needs-module M      import M from a per-node site directory (--node-site DIR/<hostname>),
                        as when a package is installed on some nodes only
  --steps N --step-s S  how long it trains
  --resumed-steps N     once resumed from a checkpoint, N steps more and done: a job that must
                        still be training when the test requeues it trains "for ever" (a large
                        --steps) until then, not for a guess of how long the test takes
  --pg-timeout-s T      gloo's timeout for a collective (60 s by default)
  --trap-term           on SIGTERM, save the checkpoint after the step in progress and exit 143,
                        as a preemptible trainer does
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import socket
import sys
import time


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--step-s", type=float, default=0.2)
    p.add_argument("--raise-rank", type=int)
    p.add_argument("--hog-rank", type=int)
    p.add_argument("--fail-step", type=int, default=2)
    p.add_argument("--needs-module")
    p.add_argument("--node-site")
    p.add_argument("--ckpt")
    p.add_argument("--resumed-steps", type=int)
    p.add_argument("--pg-timeout-s", type=float, default=60)
    p.add_argument("--trap-term", action="store_true")
    return p.parse_args()


TERM: list[int] = []


def _on_term(signum: int, frame: object) -> None:
    TERM.append(signum)


def say(line: str) -> None:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    os.write(sys.stdout.fileno(), f"[{stamp}] {line}\n".encode())


def hog() -> None:
    """Touch memory 64 MB at a time until Slurm's memory enforcement kills the step."""
    held = []
    while True:
        block = bytearray(64 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        held.append(block)
        say(f"holding {len(held) * 64} MB")
        time.sleep(0.05)


def main() -> int:
    args = parse()
    if args.node_site:
        sys.path.insert(0, os.path.join(args.node_site, socket.gethostname()))
    if args.needs_module:
        __import__(args.needs_module)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if args.trap_term:
        signal.signal(signal.SIGTERM, _on_term)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    if args.ckpt and os.path.exists(args.ckpt):
        state = torch.load(args.ckpt)
        model.module.load_state_dict(state["model"])
        start = state["step"]
        say(f"rank {rank} resumed at step {start}")
    end = args.steps if start == 0 or args.resumed_steps is None else min(args.steps, start + args.resumed_steps)
    for step in range(start, end):
        if step == args.fail_step and rank == args.raise_rank:
            raise ValueError(f"loss is nan at step {step}")
        if step == args.fail_step and rank == args.hog_rank:
            hog()
        x = torch.randn(32, 16)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        say(f"rank {rank}/{world} on {socket.gethostname()} step {step} loss {loss.item():.4f}")
        if rank == 0 and args.ckpt:
            torch.save({"step": step + 1, "model": model.module.state_dict()}, args.ckpt + ".tmp")
            os.replace(args.ckpt + ".tmp", args.ckpt)
        if TERM:
            say(f"rank {rank} got SIGTERM after step {step}: checkpoint saved, exiting")
            return 143
        time.sleep(args.step_s)
    dist.barrier()
    dist.destroy_process_group()
    say(f"rank {rank} done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
