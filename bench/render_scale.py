#!/usr/bin/env python3
"""Benchmark: render time by node count for every launcher, and its ratio to one node's.

    python bench/render_scale.py [--repeat 5] [--sizes 1,64,512,2048,4096]

The whole render path (site -> plan -> artifacts -> run directory), in-process, for each launcher
at 1, 64, 512, 2,048 and 4,096 nodes of one InfiniBand site (8 GPUs a node, no container, so that
every launcher renders; horovod and colossalai with ``max_restarts=0``, megatron ``tp=2 pp=2``).
One node is the single-node stage, 64 and up the large-cluster stage.  Prints the median of
``--repeat`` renders in milliseconds and its ratio to the same launcher's one-node render.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from render import site_file, stage_for  # bench/render.py, beside this file

SIZES = (1, 64, 512, 2048, 4096)
LAUNCHERS = ("torchrun", "deepspeed", "horovod", "accelerate", "megatron", "colossalai", "srun")
EXTRA = {"megatron": ["--set", "tp=2", "--set", "pp=2"], "horovod": ["--set", "max_restarts=0"],
         "colossalai": ["--set", "max_restarts=0"]}


def render_once(site: Path, n: int, launcher: str, out: Path) -> float:
    from clusterkit.cli import main

    argv = ["render", "--site", str(site), "--stage", stage_for(n), "--nodes", str(n), "--launcher", launcher,
            *EXTRA.get(launcher, []), "--out", str(out), "--", "python", "train.py"]
    t0 = time.perf_counter()
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            main(argv)
    except SystemExit as exc:
        if exc.code:
            raise SystemExit(f"render_scale: {launcher} at {n} nodes failed: {err.getvalue().strip()}") from None
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        site = site_file(tmp, max(sizes))
        print(f"render time, median of {args.repeat}, ms (ratio to 1 node); python {sys.version.split()[0]}")
        print(f"{'launcher':<11}" + "".join(f"{n:>16}" for n in sizes))
        for launcher in LAUNCHERS:
            render_once(site, 1, launcher, tmp / f"warm-{launcher}")          # imports and caches paid once, not in n=1
            medians = []
            for n in sizes:
                samples = [render_once(site, n, launcher, tmp / f"{launcher}-{n}-{i}") for i in range(args.repeat)]
                medians.append(statistics.median(samples))
            base = medians[0]
            print(f"{launcher:<11}" + "".join(f"{m * 1000:>8.1f} ({m / base:4.2f}x)" for m in medians))


if __name__ == "__main__":
    main()
