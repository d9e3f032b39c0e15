"""Checkpoint capacity: a checkpoint's size as ``clusterkit plan`` models model states, times the
number kept, against the free space and inodes of the checkpoint directory's file system
(docs/jobs.md, "Checkpoint cadence and space").  Pure: the free figures are given.

A checkpoint holds what a restart needs of the model states :mod:`clusterkit.sizing.model` counts:
the 16-bit weights (2 bytes per parameter), the fp32 master weights (4) and Adam's two moments
(8): 14 bytes per parameter (gradients are not saved).  A sharded checkpoint (PyTorch DCP,
DeepSpeed, Megatron's distributed optimizer) writes about one file per rank and a little metadata:
``files_per_checkpoint`` defaults to the GPU count plus one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

BYTES_PER_PARAM = 2 + 4 + 8
DEFAULT_KEEP = 2
#: below this share of free space left after the kept checkpoints, a warning (the disk also holds logs, data)
MARGIN = 0.10


@dataclass(frozen=True)
class Capacity:
    path: str
    checkpoint_bytes: int
    keep: int
    need_bytes: int
    need_files: int
    free_bytes: int | None
    free_inodes: int | None
    verdict: str            # ok | tight | too-small | unknown
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def checkpoint_bytes(params: int) -> int:
    return params * BYTES_PER_PARAM


def _gb(n: int) -> str:
    if n >= 1e12:
        return f"{n / 1e12:.2f} TB"
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def judge(path: str, params: int, gpus: int, keep: int, free_bytes: int | None, free_inodes: int | None,
          why_unknown: str = "") -> Capacity:
    """Whether ``keep`` checkpoints of a ``params``-parameter model, saved by ``gpus`` ranks, fit."""
    size = checkpoint_bytes(params)
    need, files = size * keep, (gpus + 1) * keep
    head = f"checkpoints: {keep} x {_gb(size)} ({params:.3g} parameters x {BYTES_PER_PARAM} bytes) = {_gb(need)}"
    if free_bytes is None or free_inodes is None:
        return Capacity(path, size, keep, need, files, free_bytes, free_inodes, "unknown",
                        f"{head}; free space of {path} unknown ({why_unknown or 'not readable'})")
    short = [f"{_gb(free_bytes)} free" if free_bytes < need else "",
             f"{free_inodes:,} inodes free for {files:,} files" if 0 <= free_inodes < files else ""]
    short = [s for s in short if s]
    if short:
        return Capacity(path, size, keep, need, files, free_bytes, free_inodes, "too-small",
                        f"{head} does not fit in {path}: {'; '.join(short)}")
    if free_bytes - need < MARGIN * free_bytes:
        return Capacity(path, size, keep, need, files, free_bytes, free_inodes, "tight",
                        f"{head} leaves under {MARGIN:.0%} of {path}'s {_gb(free_bytes)} free")
    return Capacity(path, size, keep, need, files, free_bytes, free_inodes, "ok",
                    f"{head}; {path} has {_gb(free_bytes)} and {free_inodes:,} inodes free")
