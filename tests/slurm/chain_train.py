#!/usr/bin/env python3
"""Training stand-in for the chain tests: one rank that resumes, trains and saves in $CK_CHECKPOINT_DIR.

It does what a training job does, so that the tests can fail:

- loads its checkpoint (``ckpt.json``: the step it saved last) from ``$CK_CHECKPOINT_DIR``;
- writes ``started.<job id>.json`` (the step it resumed from), then trains ``--steps`` steps,
  saving the checkpoint after each (written to a temporary name, then renamed);
- on SIGTERM saves at once and exits 143, as a preempted trainer does;
- writes ``ended.<job id>.json`` with the step it reached;
- with ``--fail``, fails in its own code (a KeyError from a config lookup) after starting,
  the failure a restart cannot fix;
- with ``--hold PATH``, waits after starting until PATH exists (at most 600 s), so that a test
  holds it running for as long as it needs, not for a guess of how long its steps take.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

STOP: list[int] = []


def _on_term(signum: int, frame: FrameType | None) -> None:
    STOP.append(signum)


def _write(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def _config(args: list[str]) -> dict[str, float]:
    return {"lr": 0.1} if "--fail" not in args else {}


def main() -> int:
    signal.signal(signal.SIGTERM, _on_term)
    args = sys.argv[1:]
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 5
    job = os.environ["SLURM_JOB_ID"]
    ckpt_dir = Path(os.environ["CK_CHECKPOINT_DIR"])
    ckpt = ckpt_dir / "ckpt.json"
    resumed = json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0
    _write(ckpt_dir / f"started.{job}.json", {"job": job, "resumed_step": resumed, "run": os.environ["CK_RUN_NAME"]})
    lr = _config(args)["lr"]   # --fail: KeyError here, in the user's code
    if "--hold" in args:
        hold, deadline = Path(args[args.index("--hold") + 1]), time.monotonic() + 600
        while not hold.exists() and not STOP and time.monotonic() < deadline:
            time.sleep(0.2)
    step = resumed
    for _ in range(steps):
        if STOP:
            break
        time.sleep(0.2)
        step += 1
        _write(ckpt, {"step": step, "lr": lr, "job": job})
    _write(ckpt_dir / f"ended.{job}.json", {"job": job, "step": step, "stopped": bool(STOP)})
    return 143 if STOP else 0


if __name__ == "__main__":
    sys.exit(main())
