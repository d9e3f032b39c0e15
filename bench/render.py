#!/usr/bin/env python3
"""Benchmark: CLI start-up and render time by cluster size, side by side in one run.

    python bench/render.py [--repeat 5]

Start-up: ``clusterkit --help`` next to ``python -c pass`` and ``python -c "import click"``
(the floor any click CLI pays).  Render: the whole render path (site -> plan -> artifacts ->
run directory) for 1, 64, 1024 and 4096 nodes, in-process and through the CLI, next to
ClusterShell's ``nodeset -e`` expanding the same hostlist (what an admin scripting a hostfile
by hand would start from).  Prints medians.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = (1, 64, 1024, 4096)


def timed(argv: list[str], repeat: int, cwd: Path | None = None) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def site_file(tmp: Path, n: int) -> Path:
    path = tmp / f"bench{n}.yaml"
    nodelist = "gpu0001" if n == 1 else f"gpu[0001-{n:04d}]"
    path.write_text(
        f"name: bench{n}\nscheduler: {{kind: slurm, partition: gpu}}\n"
        f"nodes: {{nodelist: '{nodelist}', gpus_per_node: 8, cpus_per_node: 96}}\n"
        "network: {fabric: infiniband, hcas: [mlx5_0, mlx5_1, mlx5_2, mlx5_3], socket_ifname: ib0}\n"
        "storage:\n  - {path: /lustre, type: lustre, use: [data, checkpoints]}\n"
        f"  - {{path: {tmp}, type: local, shared: true}}\n")   # multi-node run dirs must be shared
    return path


def stage_for(n: int) -> str:
    return "single-node" if n == 1 else ("multi-node" if n <= 8 else "large-cluster")


def render_args(site: Path, n: int, out: Path) -> list[str]:
    return ["render", "--site", str(site), "--stage", stage_for(n), "--nodes", str(n), "--launcher",
            "deepspeed" if n > 1 else "torchrun", "--out", str(out), "--", "python", "train.py"]


def in_process(site: Path, n: int, tmp: Path, repeat: int) -> float:
    from clusterkit.cli import main

    samples = []
    for i in range(repeat):
        out = tmp / f"ip-{n}-{i}"
        t0 = time.perf_counter()
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                main(render_args(site, n, out))
        except SystemExit as exc:
            if exc.code:
                raise
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    py = sys.executable
    print(f"CLI start-up (median of {args.repeat})")
    rows = [("python -c pass", timed([py, "-c", "pass"], args.repeat)),
            ('python -c "import click"', timed([py, "-c", "import click"], args.repeat)),
            ("clusterkit --help", timed([py, "-m", "clusterkit", "--help"], args.repeat))]
    for name, t in rows:
        print(f"  {name:<28} {t * 1000:8.1f} ms")
    nodeset = shutil.which("nodeset")
    print(f"\nRender by cluster size (median of {args.repeat}; deepspeed + hostfile past one node)")
    print(f"  {'nodes':>6} {'in-process':>12} {'CLI (process)':>14} {'nodeset -e (CLI)':>17}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for n in SIZES:
            site = site_file(tmp, n)
            t_in = in_process(site, n, tmp, args.repeat)
            outs = iter(range(10 ** 6))
            samples = []
            for _ in range(args.repeat):
                out = tmp / f"cli-{n}-{next(outs)}"
                t0 = time.perf_counter()
                subprocess.run([py, "-m", "clusterkit", *render_args(site, n, out)], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                samples.append(time.perf_counter() - t0)
            t_cli = statistics.median(samples)
            nodelist = "gpu0001" if n == 1 else f"gpu[0001-{n:04d}]"
            t_ns = timed([nodeset, "-e", nodelist], args.repeat) if nodeset else float("nan")
            print(f"  {n:>6} {t_in * 1000:10.1f} ms {t_cli * 1000:11.1f} ms {t_ns * 1000:14.1f} ms")


if __name__ == "__main__":
    main()
