#!/usr/bin/env python3
"""Benchmark: ``sites drift`` on a 5,000-node cluster, without the cluster.

    python bench/sites_drift.py [--nodes 5000] [--repeat 5]

Generates ``scontrol show node -o`` text for N nodes in the layout Slurm 22.05 prints (the
testbed's captured line, one per node: typed GRES with socket affinity, features, a few
nodes DOWN or DRAIN with a reason), a partition and a config, and times, in-process:
parsing the node text, the whole gather (three scontrol calls answered from memory: the
seam is counted, one call per kind whatever N is), and the comparison against a site
of N nodes with some drift.  Prints medians, wall and CPU time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "toolkit"))

NODE = ("NodeName=gpu{i:05d} Arch=x86_64 CoresPerSocket=48  CPUAlloc=0 CPUEfctv=96 CPUTot=96 CPULoad=0.51 "
        "AvailableFeatures=h100,ib ActiveFeatures=h100,ib Gres=gpu:h100:{gpus}(S:0-1) NodeAddr=gpu{i:05d} "
        "NodeHostName=gpu{i:05d} Version=22.05.8 OS=Linux 5.15.0-105-generic #115-Ubuntu SMP  RealMemory=2063937 "
        "AllocMem=0 FreeMem=1998311 Sockets=2 Boards=1 State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 "
        "Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2024-05-02T08:11:40 SlurmdStartTime=2024-05-02T08:13:02 "
        "LastBusyTime=2024-05-03T10:20:00 CfgTRES=cpu=96,mem=2063937M,billing=96,gres/gpu={gpus} AllocTRES= "
        "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s{reason}\n")


def node_text(n: int) -> str:
    out = []
    for i in range(1, n + 1):
        state, reason = "IDLE", ""
        if i % 997 == 0:
            state, reason = "DOWN*", " Reason=Not responding [slurm@2024-05-03T10:21:07]"
        elif i % 499 == 0:
            state, reason = "IDLE+DRAIN", " Reason=xid 79 on GPU 3 [root@2024-05-03T10:21:07]"
        out.append(NODE.format(i=i, gpus=4 if i % 1000 == 0 else 8, state=state, reason=reason))
    return "".join(out)


def fake_slurm(n: int, calls: list[str]) -> Callable[[Sequence[str]], str]:
    nodes = node_text(n)
    answers = {
        "config": ("Configuration data as of 2024-05-03T10:22:00\nClusterName             = big\n"
                   "SLURM_VERSION           = 22.05.8\n"),
        "partition": (f"PartitionName=gpu Default=YES DefaultTime=04:00:00 MaxTime=2-00:00:00 Nodes=gpu[00001-{n:05d}] "
                      f"State=UP TotalNodes={n}\n"),
        "node": nodes,
    }

    def run(argv: Sequence[str]) -> str:
        calls.append(" ".join(argv))
        return answers[argv[2]]
    return run


def median_time(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall and CPU seconds: on a shared machine the CPU time is the steadier figure."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def row(label: str, t: tuple[float, float]) -> str:
    return f"  {label:<32}{t[0] * 1000:8.0f} ms wall {t[1] * 1000:8.0f} ms CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from clusterkit.config.load import load_file_located
    from clusterkit.sites import drift, facts, slurm_text

    n = args.nodes
    calls: list[str] = []
    run = fake_slurm(n, calls)
    text = run(("scontrol", "show", "node", "-o"))
    with tempfile.TemporaryDirectory() as tmp:
        site_path = Path(tmp) / "big.yaml"
        site_path.write_text(f"name: big\nscheduler: {{cluster: big, partition: gpu, time: '04:00:00'}}\n"
                             f"nodes: {{nodelist: 'gpu[00001-{n + 10:05d}]', gpus_per_node: 8, gpu_model: H100, "
                             "cpus_per_node: 96, mem_gb: 2015}\n")
        site, lines = load_file_located(site_path)
        calls.clear()
        gathered = facts.gather(run)
        assert len(calls) == 3, calls
        t_parse = median_time(lambda: slurm_text.parse_nodes(text), args.repeat)
        t_gather = median_time(lambda: facts.gather(run), args.repeat)
        t_check = median_time(lambda: drift.check(site, lines, gathered), args.repeat)
        report = drift.check(site, lines, gathered)
    print(f"sites drift, {n:,} nodes ({len(text) / 1e6:.1f} MB of scontrol show node -o), median of {args.repeat}")
    print(f"  scontrol calls per gather      {len(calls) // (args.repeat + 1)} (config, partition, node)")
    print(row("parse scontrol show node -o", t_parse))
    print(row("gather (parse all three)", t_gather))
    print(row(f"compare with a {n:,}-node site", t_check))
    print(f"  found: {len(report.drift)} drifts, {len(report.node_state)} node-state groups")


if __name__ == "__main__":
    main()
