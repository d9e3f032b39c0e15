#!/usr/bin/env python3
"""A real PyTorch Lightning training run (CPU, DDP over gloo) with Slurm auto-requeue.

Lightning's own ``SLURMEnvironment(auto_requeue=True)`` handles SIGUSR1: every rank saves the
HPC checkpoint (``hpc_ckpt_<n>.ckpt`` in the default root dir, here ``$CK_CHECKPOINT_DIR``) and
rank 0 calls ``scontrol requeue``.  On the next run Lightning resumes from that checkpoint by
itself.  Markers in ``$CK_CHECKPOINT_DIR`` let the test see it happen:

- ``started.r<rank>.n<restart>.json``: the global step training started (or resumed) from;
- ``parked.r<rank>.n0.json``: on the first run every rank waits at the start of step ``PARK_STEP``
  (in ``training_step``, before its forward and backward) until Slurm's TERM comes; the test
  sends the time-limit warning once all four have parked;
- ``saved.r<rank>.n<restart>.json``: written from ``on_save_checkpoint``, which runs on every
  rank while Lightning's signal handler saves (this run saves no other checkpoint);
- ``done.r<rank>.json``: from restart 1 on, training stops by itself 20 steps after resuming.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.environments import SLURMEnvironment
from torch.utils.data import DataLoader, TensorDataset

CKPT = Path(os.environ["CK_CHECKPOINT_DIR"])
RESTART = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
# Lightning's handlers run collectives inside the signal handler (the USR1 handler saves the
# checkpoint, which waits on a barrier; the TERM handler broadcasts), wherever the rank is when
# the signal lands (Lightning-AI/pytorch-lightning#21406).  A signal that reaches one rank inside
# its training step and another inside DDP's gradient all-reduce pairs a barrier with an
# all-reduce, and the ranks hang until Slurm's grace ends.  So on the first run every rank takes
# both signals at one point of one step: parked at the start of step PARK_STEP, where no
# collective is in flight.  What is tested is still Lightning's own save, requeue and resume.
PARK_STEP = 5
PARK_S = 600.0     # bounded: a warning that never comes ends the park, and the test fails on its markers
TERM_SEEN = threading.Event()


def _write(name: str, data: dict[str, Any]) -> None:
    tmp = CKPT / f".{name}.tmp"
    tmp.write_text(json.dumps(data))
    tmp.replace(CKPT / name)


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.resumed_from = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if RESTART == 0 and self.trainer.global_step == PARK_STEP:
            self._park()
        time.sleep(0.2)   # a step's compute
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def on_train_start(self) -> None:
        self.resumed_from = self.trainer.global_step
        _write(f"started.r{self.global_rank}.n{RESTART}.json",
               {"rank": self.global_rank, "restart": RESTART, "resumed_step": self.trainer.global_step,
                "world": self.trainer.world_size, "at": time.time()})

    def _park(self) -> None:
        """Wait, at the start of step PARK_STEP, until Slurm's TERM (after Lightning's requeue):
        the USR1 that comes first runs Lightning's save here, on every rank alike."""
        _write(f"parked.r{self.global_rank}.n{RESTART}.json",
               {"rank": self.global_rank, "step": self.trainer.global_step, "at": time.time()})
        deadline = time.monotonic() + PARK_S
        while not TERM_SEEN.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)   # a handler runs between these sleeps, in this frame

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if RESTART >= 1 and self.trainer.global_step >= self.resumed_from + 20:
            self.trainer.should_stop = True

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        _write(f"saved.r{self.global_rank}.n{RESTART}.json",
               {"rank": self.global_rank, "restart": RESTART, "step": self.trainer.global_step, "at": time.time()})

    def on_train_end(self) -> None:
        if RESTART >= 1:
            _write(f"done.r{self.global_rank}.json", {"rank": self.global_rank, "step": self.trainer.global_step})


def main() -> None:
    # Lightning calls a TERM handler it finds installed after its own (its _SignalConnector)
    signal.signal(signal.SIGTERM, lambda signum, frame: TERM_SEEN.set())
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    trainer = L.Trainer(
        accelerator="cpu", devices=int(os.environ["SLURM_NTASKS_PER_NODE"]), num_nodes=int(os.environ["SLURM_NNODES"]),
        strategy="ddp", plugins=[SLURMEnvironment(auto_requeue=True, requeue_signal=signal.SIGUSR1)],
        default_root_dir=str(CKPT), max_steps=100_000, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Tiny(), DataLoader(data, batch_size=4))


if __name__ == "__main__":
    main()
