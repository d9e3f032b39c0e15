#!/usr/bin/env python3
"""Training stand-in for the preemption tests, started by the real launchers.

It does what a preemptible training job does, so that the tests can fail:

- joins the launcher's world (torch.distributed, gloo) and checks it with one all-reduce;
- resumes from its checkpoint in ``$CK_CHECKPOINT_DIR`` (the step it saved last time);
- on SIGTERM "saves" for ``--save-s`` seconds (2 by default), writes its checkpoint and a
  marker ``saved.r<rank>.n<restart>.json`` (when TERM arrived, when the save was done), exits 0;
- from restart ``--finish-on-restart`` on, it finishes by itself after a few steps and writes
  ``done.r<rank>.json``.

Unknown arguments (``--local_rank=N``, ``--deepspeed_config``, Megatron's parallel sizes) are
the launchers' and are ignored.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType

TERM_AT: list[float] = []


def _on_term(signum: int, frame: FrameType | None) -> None:
    # deepspeed's launcher forwards TERM as well: a rank may see it twice; the first counts
    if not TERM_AT:
        TERM_AT.append(time.time())


def _opt(name: str, default: float) -> float:
    args = sys.argv[1:]
    return float(args[args.index(name) + 1]) if name in args else default


def _write(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def _join_world() -> tuple[int, int]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.ones(1)
    dist.all_reduce(total)
    if int(total.item()) != world:
        raise SystemExit(f"rank {rank}: all-reduce gave {total.item()}, expected {world}")
    dist.destroy_process_group()  # each rank saves on its own; no collective after TERM
    return rank, world


def main() -> int:
    signal.signal(signal.SIGTERM, _on_term)
    save_s = _opt("--save-s", 2.0)
    finish_on = int(_opt("--finish-on-restart", 1))
    restart = int(os.environ["CK_RESTART_COUNT"])
    ckpt_dir = Path(os.environ["CK_CHECKPOINT_DIR"])
    rank, world = _join_world()
    ckpt = ckpt_dir / f"ckpt.r{rank}.json"
    resumed = json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0
    _write(ckpt_dir / f"started.r{rank}.n{restart}.json",
           {"rank": rank, "world": world, "restart": restart, "resumed_step": resumed,
            "host": socket.gethostname(), "pid": os.getpid(), "at": time.time()})
    step = resumed
    while not TERM_AT:
        step += 1
        if restart >= finish_on and step >= resumed + 20:
            _write(ckpt_dir / f"done.r{rank}.json", {"rank": rank, "restart": restart, "step": step})
            return 0
        time.sleep(0.05)
    time.sleep(save_s)  # "saving" the model: the launcher and Slurm must leave us this long
    _write(ckpt, {"step": step, "restart": restart})
    _write(ckpt_dir / f"saved.r{rank}.n{restart}.json",
           {"rank": rank, "restart": restart, "step": step, "term_at": TERM_AT[0], "saved_at": time.time()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
