#!/usr/bin/env python3
"""Benchmark: `clusterkit sites list` with 200 site files on the search path, one of them hostile.

    python bench/sites.py [--repeat 3]

`sites list` loads every site on the search path, so one hostile file in a shared
``./site_configs`` is paid by everyone who lists sites.  Side by side in one run: listing one
site, 200 ordinary sites, and 199 ordinary sites plus one hostile one (a 400-byte YAML alias
bomb, a ten-million-host nodelist, a 1 MiB file, 5,000 levels of nesting), next to loading one
site (`sites show`).  Prints the median wall time and the peak memory (max RSS) of the
clusterkit process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ORDINARY = """\
name: site{i:03d}
scheduler: {{kind: slurm, partition: gpu, time: "04:00:00", sbatch: {{exclusive: true}}}}
nodes: {{nodelist: "gpu{i:03d}-[0001-0064]", gpus_per_node: 8, cpus_per_node: 96, mem_gb: 1024}}
network: {{fabric: infiniband, hcas: [mlx5_0, mlx5_1, mlx5_2, mlx5_3], socket_ifname: ib0}}
storage:
  - {{path: /lustre, type: lustre, use: [data, checkpoints]}}
nccl: {{env: {{NCCL_IB_TIMEOUT: "22"}}}}
"""

_BOMB = "".join(f"{a}: &{a} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['x'] * 9)}]\n"
                for p, a in zip(" abcdefgh", "abcdefghi", strict=True))
HOSTILE = {
    "alias bomb (400 bytes)": _BOMB,
    "nodelist n[1-10000000]": 'name: big\nnodes: {nodelist: "n[1-10000000]", gpus_per_node: 8}\n',
    "file of 1 MiB + 1": "name: fat\ndescription: '" + "x" * (1024 * 1024) + "'\n",
    "5,000 levels of nesting": "name: deep\ndescription: " + "[" * 5000 + "]" * 5000 + "\n",
}


def make_dir(root: Path, n: int, hostile: str | None) -> Path:
    configs = root / "site_configs"
    configs.mkdir(parents=True)
    for i in range(n - (1 if hostile else 0)):
        (configs / f"site{i:03d}.yaml").write_text(ORDINARY.format(i=i))
    if hostile:
        (configs / "zz-hostile.yaml").write_text(hostile)
    return root


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one clusterkit process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "clusterkit", *argv], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"clusterkit {' '.join(argv)} failed in {cwd}")
    return wall, usage.ru_maxrss / 1024


def measure(argv: list[str], cwd: Path, env: dict[str, str], repeat: int) -> tuple[float, float]:
    samples = [run(argv, cwd, env) for _ in range(repeat)]
    return statistics.median(s[0] for s in samples), max(s[1] for s in samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ck-bench-sites-") as tmp:
        root = Path(tmp)
        # only ./site_configs and the built-ins on the search path
        env = dict(os.environ, CLUSTERKIT_SITES="", HOME=str(root))
        rows: list[tuple[str, float, float]] = []
        one = make_dir(root / "one", 1, None)
        rows.append(("sites show site000 (load one)", *measure(["sites", "show", "site000"], one, env, args.repeat)))
        rows.append(("sites list, 1 site", *measure(["sites", "list"], one, env, args.repeat)))
        many = make_dir(root / "many", 200, None)
        rows.append(("sites list, 200 sites", *measure(["sites", "list"], many, env, args.repeat)))
        for i, (what, text) in enumerate(HOSTILE.items()):
            d = make_dir(root / f"hostile{i}", 200, text)
            rows.append((f"sites list, 199 sites + {what}", *measure(["sites", "list"], d, env, args.repeat)))
    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  {'wall s (median)':>15}  {'peak RSS MiB':>12}")
    for what, wall, rss in rows:
        print(f"{what:<{width}}  {wall:>15.2f}  {rss:>12.0f}")


if __name__ == "__main__":
    main()
