#!/usr/bin/env python3
"""Array-task stand-in for the job array tests: a short training loop that shows what it saw.

It does what one task of a sweep does, so the tests can fail:

- reads its task's values: ``CK_ARRAY_INDEX``, every ``CK_SWEEP_*``, and its own argv (where
  ``{KEY}`` was replaced by the value);
- resumes from ``$CK_CHECKPOINT_DIR/ckpt.json`` and writes it after every step (``--steps``
  steps of ``--step-s`` seconds each); SIGTERM ends the loop after saving;
- with ``--mode crash`` fails at its second step (a Python exception, as a diverged run does);
- writes ``$CK_TASK_DIR/seen.json``: the index, values, argv, port, job id, checkpoint directory
  and when it started and ended (wall clock), which the tests compare across tasks.
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

STOP: list[float] = []


def _on_term(signum: int, frame: FrameType | None) -> None:
    STOP.append(time.time())


def _opt(name: str, default: float) -> float:
    args = sys.argv[1:]
    return float(args[args.index(name) + 1]) if name in args else default


def _write(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def main() -> int:
    signal.signal(signal.SIGTERM, _on_term)
    started = time.time()
    task_dir = Path(os.environ["CK_TASK_DIR"])
    ckpt_dir = Path(os.environ["CK_CHECKPOINT_DIR"])
    ckpt = ckpt_dir / "ckpt.json"
    step = json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0
    steps, step_s = int(_opt("--steps", 10)), _opt("--step-s", 0.5)
    crash = "--mode" in sys.argv and sys.argv[sys.argv.index("--mode") + 1] == "crash"
    # the port is this task's: nothing else on the node may hold it while the task runs
    with socket.socket() as s:
        s.bind(("127.0.0.1", int(os.environ["CK_PORT"])))
        s.listen()
        while step < steps and not STOP:
            time.sleep(step_s)   # one "training step"
            step += 1
            if crash and step == 2:   # the user's code fails the same way in every task swept into it
                raise FloatingPointError(f"loss is nan at step {step}")
            _write(ckpt, {"step": step})
    _write(task_dir / "seen.json", {
        "index": os.environ["CK_ARRAY_INDEX"], "job_id": os.environ["CK_JOB_ID"],
        "slurm_job_id": os.environ["SLURM_JOB_ID"], "port": os.environ["CK_PORT"],
        "checkpoint_dir": str(ckpt_dir), "argv": sys.argv[1:], "host": socket.gethostname(),
        "sweep": {k: v for k, v in os.environ.items() if k.startswith("CK_SWEEP_")},
        "step": step, "started": started, "ended": time.time(), "stopped": bool(STOP)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
