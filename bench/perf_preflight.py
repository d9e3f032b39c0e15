"""What ``clusterkit preflight --perf`` costs, and the smallest slow link it finds, on the Slurm testbed.

    python bench/perf_preflight.py [--repeat 2] [--fractions 0.2,0.4,0.6,0.8] [--capture DIR]

Starts its own 5-node testbed (tests/slurm/testbed.sh, needs root; gloo on the CPU, one task
per node) and prints figures only; nothing is asserted.

1. Time of the check on 2, 3, 4 and 5 nodes (rounds constant: 3, fewer where the nodes make
   fewer pairings), from the CLI's start to its exit, split into start-up (the slowest task's
   torch import plus process-group set-up) and measurement (the slowest task's figures), next
   to what users would run instead at the same scale: one bare ``srun hostname`` step (Slurm's
   own launch cost) and one ``srun python -c 'import torch'`` (the import alone).
2. One link slowed: node3's traffic to node4 only (``tc`` prio + u32 filter + tbf on node3's
   interface), at fractions of the pair bandwidth measured unthrottled.  For each fraction:
   that pair's figure over the median of all pairs, the lowest other pair, and whether the
   check named exactly node3<->node4 (a pair of round 1) as a slow link (and nothing else) at the site's
   slow_ratio, in every repeat.
3. An estimate for 512 nodes, and how it is made.

``--capture DIR``: also save the raw figure lines of one healthy, one slowed-node and one
CPU-limited run (the unit tests' recorded figures come from these).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "toolkit"))

from submit import free_base_port  # noqa: E402  (bench/submit.py, beside this script: the testbed's ports)

from clusterkit.config.load import load_site  # noqa: E402  (after the path is set)
from clusterkit.preflight import perf  # noqa: E402

NODES = 5
SITE = """\
name: perf-bench
scheduler: {kind: slurm, partition: debug}
nodes: {nodelist: "node[1-5]", gpus_per_node: 8, gpu_model: H100}
perf:
  backend: gloo
  gemm_n: 512
  gemm_iters: 4
  inter_message_mb: 4
  warmup: 1
  iters: 6
  slow_ratio: %s
  timeout_s: 240
"""


def start_testbed() -> tuple[Path, dict[str, str], dict[str, str]]:
    lab = Path(tempfile.mkdtemp(prefix="clusterkit-bench-slurm-"))
    lab.chmod(0o755)  # munged wants every directory above its socket world-executable
    env = dict(os.environ, SLURMLAB_DIR=str(lab), SLURMLAB_NODES=str(NODES), SLURMLAB_PORT=str(free_base_port(2)),
               SLURMLAB_FIRST_JOB_ID=str(random.randrange(1000, 60000) * 1000))
    env.pop("SLURM_CONF", None)
    t0 = time.perf_counter()
    subprocess.run(["bash", str(REPO / "tests/slurm/testbed.sh")], env=env, check=True, capture_output=True,
                   text=True, timeout=180)
    print(f"testbed started in {time.perf_counter() - t0:.1f} s ({NODES} slurmd)")
    exports: dict[str, str] = {}
    for line in (lab / "testbed.env").read_text().splitlines():
        words = line.split()
        if words[:1] == ["export"]:
            exports.update(w.split("=", 1) for w in words[1:] if "=" in w)
    return lab, env, exports


def login_env(lab: Path, exports: dict[str, str]) -> dict[str, str]:
    """srun on the testbed's login node (the controller's namespace), as the tests run it."""
    bindir = lab / "login-bin"
    bindir.mkdir(exist_ok=True)
    real = shutil.which("srun")
    assert real
    (bindir / "srun").write_text(f'#!/bin/sh\nexec ip netns exec {exports["SLURMLAB_NETNS_CTL"]} {real} "$@"\n')
    (bindir / "srun").chmod(0o755)
    return dict(os.environ, SLURM_CONF=str(lab / "etc/slurm.conf"),
                PATH=os.pathsep.join([str(bindir), str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def run_check(env: dict[str, str], site: Path, nodes: str) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "clusterkit", "preflight", "--site", str(site), "--transport", "srun",
                           "--nodelist", nodes, "--perf", "--json"], env=env, capture_output=True, text=True,
                          timeout=400)
    wall = time.perf_counter() - t0
    if not proc.stdout.strip():
        raise SystemExit(f"preflight --perf printed nothing: {proc.stderr[-2000:]}")
    return wall, json.loads(proc.stdout)


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=300)
    return time.perf_counter() - t0


@contextmanager
def slow_link(exports: dict[str, str], node: str, peer_addr: str, mbit: float) -> Any:
    """node's traffic to peer_addr only, through a tbf of ``mbit``: one link, not the node."""
    ns, dev = exports[f"SLURMLAB_NETNS_{node}"], exports[f"SLURMLAB_IF_{node}"]
    tc = ["ip", "netns", "exec", ns, "tc"]
    cmds = [[*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "prio"],
            [*tc, "qdisc", "add", "dev", dev, "parent", "1:3", "handle", "30:", "tbf", "rate", f"{mbit:.0f}mbit",
             "burst", "64kb", "latency", "400ms"],
            [*tc, "filter", "add", "dev", dev, "parent", "1:0", "protocol", "ip", "prio", "1", "u32", "match", "ip",
             "dst", f"{peer_addr}/32", "flowid", "1:3"]]
    for c in cmds:
        subprocess.run(c, check=True, capture_output=True, timeout=10)
    try:
        yield
    finally:
        subprocess.run([*tc, "qdisc", "del", "dev", dev, "root"], check=True, capture_output=True, timeout=10)


def pair_figures(report: dict[str, Any]) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for n in report["nodes"]:
        for p in n["busbw_inter_gbps"]:
            key = (min(n["host"], p["peer"]), max(n["host"], p["peer"]))
            out[key] = p["gbps"]
    return out


def bench_scaling(env: dict[str, str], site: Path, repeat: int) -> dict[str, float]:
    print(f"\n1. time of the check (median of {repeat}; seconds)")
    print(f"   {'nodes':>5} {'pairings':>8} {'total':>7} {'start-up':>9} {'measure':>8} {'srun hostname':>14} "
          f"{'srun import torch':>18}")
    last: dict[str, float] = {}
    for n in range(2, NODES + 1):
        nodes = f"node[1-{n}]"
        walls, starts, measures, rounds = [], [], [], 0
        for _ in range(repeat):
            wall, rep = run_check(env, site, nodes)
            walls.append(wall)
            starts.append(rep["perf"]["startup_s"] or 0.0)
            measures.append(rep["perf"]["measure_s"] or 0.0)
            rounds = len(rep["perf"]["pairings"])
        hostname = statistics.median(timed(["srun", "-p", "debug", "-N", str(n), "-w", nodes, "hostname"], env)
                                     for _ in range(repeat))
        torch_imp = statistics.median(timed(["srun", "-p", "debug", "-N", str(n), "-w", nodes, sys.executable, "-c",
                                             "import torch"], env) for _ in range(repeat))
        last = {"total": statistics.median(walls), "startup": statistics.median(starts),
                "measure": statistics.median(measures)}
        print(f"   {n:>5} {rounds:>8} {last['total']:>7.1f} {last['startup']:>9.1f} {last['measure']:>8.1f} "
              f"{hostname:>14.1f} {torch_imp:>18.1f}")
    return last


def bench_slow_link(env: dict[str, str], site: Path, exports: dict[str, str], fractions: list[float], repeat: int,
                    ratio: float) -> None:
    _, base = run_check(env, site, "node[1-5]")
    pairs = pair_figures(base)
    ref = statistics.median(pairs.values())
    target = ("node3", "node4")
    print(f"\n2. one link slowed (node3 -> node4 only), unthrottled pairs: median {ref:.2f} Gbit/s, "
          f"lowest {min(pairs.values()) / ref:.2f} x median; site slow_ratio {ratio:g}")
    print(f"   {'fraction':>8} {'tbf Mbit/s':>10} {'node3-4 / median':>17} {'lowest other / median':>22} "
          f"{'named node3<->node4 only':>25}")
    probe = subprocess.run(["ip", "netns", "exec", exports["SLURMLAB_NETNS_node3"], "tc", "qdisc", "add", "dev",
                            exports["SLURMLAB_IF_node3"], "root", "handle", "1:", "prio"],
                           capture_output=True, text=True)
    if probe.returncode != 0:  # this kernel may lack sch_prio, as it lacks sch_netem: no one-link fault here
        print(f"   not measured: one link cannot be slowed here ({probe.stderr.strip()[:200]})")
        return
    subprocess.run(["ip", "netns", "exec", exports["SLURMLAB_NETNS_node3"], "tc", "qdisc", "del", "dev",
                    exports["SLURMLAB_IF_node3"], "root"], capture_output=True)
    for f in fractions:
        mbit = f * pairs.get(target, ref) * 1000
        seen, others, hits = [], [], 0
        for _ in range(repeat):
            with slow_link(exports, "node3", exports["SLURMLAB_ADDR_node4"], mbit):
                _, rep = run_check(env, site, "node[1-5]")
            figs = pair_figures(rep)
            med = statistics.median(figs.values())
            seen.append(figs.get(target, 0.0) / med)
            others.append(min(g for k, g in figs.items() if k != target) / med)
            named = [tuple(link["nodes"]) for link in rep["slow_links"]]
            bad = [n["host"] for n in rep["nodes"] if n["status"] != "ok"]
            hits += named == [target] and not bad
        print(f"   {f:>8.2f} {mbit:>10.0f} {' '.join(f'{x:.2f}' for x in seen):>17} "
              f"{' '.join(f'{x:.2f}' for x in others):>22} {f'{hits} of {repeat}':>25}")


def capture(env: dict[str, str], site_path: Path, exports: dict[str, str], out: Path, which: set[str]) -> None:
    """Raw figure lines of three runs, for the unit tests (one srun step each, as the CLI runs it)."""
    site = load_site(str(site_path))
    hosts = [f"node{i}" for i in range(1, NODES + 1)]
    import torch

    def one(name: str, what: str) -> None:
        marker = "@@ck-perf-capture"
        spec = perf.worker_spec(site.perf, marker, 32000 + random.randrange(20000))
        step = perf.run_step(perf.srun_argv(site, hosts, spec, ["--partition=debug"]), 300, env=env)
        head = [f"# clusterkit preflight --perf worker output (srun --label), {what}",
                f"# source: 5-node Slurm testbed (tests/slurm/testbed.sh), torch {torch.__version__}, gloo, "
                f"one task per node; settings as bench/perf_preflight.py",
                f"# marker: {marker}"]
        (out / f"{name}.txt").write_text("\n".join([*head, *step.stdout, ""]))
        print(f"   captured {name}.txt ({len(step.stdout)} lines)")

    out.mkdir(parents=True, exist_ok=True)
    if "healthy" in which:
        one("healthy", "all five nodes healthy")
    if "node3" in which:
        with _tbf(exports, "node3", 100):
            one("node3-link-100mbit", "node3's interface limited to 100 Mbit/s (tc tbf)")
    cg = exports.get("SLURMLAB_CGROUP_node2")
    if cg and "node2" in which:
        with _cpu(Path(cg), 5):
            one("node2-cpu-5pct", "node2's cgroup limited to 5% of one CPU (cpu.max or cfs quota)")


@contextmanager
def _tbf(exports: dict[str, str], node: str, mbit: int) -> Any:
    ns, dev = exports[f"SLURMLAB_NETNS_{node}"], exports[f"SLURMLAB_IF_{node}"]
    tc = ["ip", "netns", "exec", ns, "tc", "qdisc"]
    subprocess.run([*tc, "add", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit", "burst", "64kb", "latency", "400ms"],
                   check=True, capture_output=True, timeout=10)
    try:
        yield
    finally:
        subprocess.run([*tc, "del", "dev", dev, "root"], check=True, capture_output=True, timeout=10)


@contextmanager
def _cpu(cgroup: Path, percent: int) -> Any:
    """At most ``percent`` of one CPU: cgroup v2 cpu.max or v1 cfs quota."""
    period = 100_000
    v2 = (cgroup / "cpu.max").exists()
    if v2:
        (cgroup / "cpu.max").write_text(f"{period * percent // 100} {period}\n")
    else:
        (cgroup / "cpu.cfs_period_us").write_text(f"{period}\n")
        (cgroup / "cpu.cfs_quota_us").write_text(f"{period * percent // 100}\n")
    try:
        yield
    finally:
        if v2:
            (cgroup / "cpu.max").write_text(f"max {period}\n")
        else:
            (cgroup / "cpu.cfs_quota_us").write_text("-1\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--fractions", default="0.2,0.4,0.6,0.8")
    ap.add_argument("--slow-ratio", type=float, default=0.5, help="the bench site's perf.slow_ratio")
    ap.add_argument("--capture", type=Path, help="also save raw figure lines of three runs here")
    ap.add_argument("--captures", default="healthy,node3,node2", help="which of the three")
    ap.add_argument("--only", choices=["scaling", "link", "capture", "example"],
                    help="example: the plain output of one check with node3's link limited (the README's)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the testbed on the way out
    lab, tb_env, exports = start_testbed()
    work = Path(tempfile.mkdtemp(prefix="clusterkit-bench-"))
    site = work / "perf-bench.yaml"
    site.write_text(SITE % args.slow_ratio)
    env = login_env(lab, exports)
    env["CLUSTERKIT_STATE_DIR"] = str(work / "state")
    try:
        if args.only in (None, "scaling"):
            bench_scaling(env, site, args.repeat)
        if args.only in (None, "link"):
            bench_slow_link(env, site, exports, [float(x) for x in args.fractions.split(",")], args.repeat,
                            args.slow_ratio)
        if args.only == "example":
            with _tbf(exports, "node3", 100):
                proc = subprocess.run([sys.executable, "-m", "clusterkit", "preflight", "--site", str(site),
                                       "--transport", "srun", "--nodelist", "node[1-5]", "--perf"], env=env,
                                      capture_output=True, text=True, timeout=400)
            print(f"$ clusterkit preflight --site perf-bench --transport srun --nodelist 'node[1-5]' --perf\n"
                  f"{proc.stdout}{proc.stderr}(exit {proc.returncode})")
        if args.capture is not None:
            print("\ncaptures")
            capture(env, site, exports, args.capture, set(args.captures.split(",")))
    finally:
        subprocess.run(["bash", str(REPO / "tests/slurm/testbed.sh"), "--stop"], env=tb_env, capture_output=True,
                       timeout=120)
        shutil.rmtree(lab, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
