"""What ``clusterkit preflight --perf`` costs, and the smallest slow link it finds, on the Slurm testbed.

    python bench/perf_preflight.py [--repeat 2] [--fractions 0.2,0.4,0.5,0.6,0.7,0.8] [--capture DIR]

Starts its own 5-node testbed (tests/slurm/testbed.sh, needs root; gloo on the CPU, one task
per node) and prints figures only; nothing is asserted.

1. Time of the check on 2, 3, 4 and 5 nodes (rounds constant: 3, fewer where the nodes make
   fewer pairings), from the CLI's start to its exit, split into start-up (the slowest task's
   torch import plus process-group set-up) and measurement (the slowest task's figures), next
   to what users would run instead at the same scale: one bare ``srun hostname`` step (Slurm's
   own launch cost) and one ``srun python -c 'import torch'`` (the import alone).
2. One link slowed: node3's traffic to node4 only (``tc`` htb class + u32 filter on node3's
   interface; its other traffic leaves unshaped), at fractions of the median pair's bandwidth
   measured unthrottled (the others' bandwidth).  For each fraction: that pair's figure over
   the median of all pairs, the lowest other pair, and whether the check named exactly
   node3<->node4 (a pair of round 1) as a slow link (and nothing else) at the site's
   slow_ratio, in every repeat.
3. An estimate for 512 nodes from part 1's figures, part by part, with what it assumes.

``--capture DIR``: also save the raw figure lines of one healthy, one slowed-node, one
slowed-link and one CPU-limited run (the unit tests' recorded figures come from these).
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
            exports.update(dict(w.split("=", 1) for w in words[1:] if "=" in w))
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


def _htb_cmds(exports: dict[str, str], node: str, peer_addr: str, mbit: float) -> tuple[list[str], list[list[str]]]:
    """tc commands that send node's packets to peer_addr only through an htb class of ``mbit``.

    htb with no default class: unclassified traffic (to every other address) goes out
    directly, unshaped; the u32 filter puts the peer's packets in class 1:20.
    """
    ns, dev = exports[f"SLURMLAB_NETNS_{node}"], exports[f"SLURMLAB_IF_{node}"]
    tc = ["ip", "netns", "exec", ns, "tc"]
    rate = f"{max(mbit, 1):.0f}mbit"
    return tc, [[*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb"],
                [*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb", "rate", rate, "ceil", rate,
                 "burst", "64kb", "cburst", "64kb"],
                [*tc, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match",
                 "ip", "dst", f"{peer_addr}/32", "flowid", "1:20"]]


@contextmanager
def slow_link(exports: dict[str, str], node: str, peer_addr: str, mbit: float) -> Any:
    """node's traffic to peer_addr only, through an htb class of ``mbit``: one link, not the node."""
    tc, cmds = _htb_cmds(exports, node, peer_addr, mbit)
    dev = exports[f"SLURMLAB_IF_{node}"]
    try:
        for c in cmds:
            subprocess.run(c, check=True, capture_output=True, timeout=10)
        yield
    finally:
        subprocess.run([*tc, "qdisc", "del", "dev", dev, "root"], capture_output=True, timeout=10)


def can_slow_link(exports: dict[str, str]) -> str | None:
    """None when tc can shape one link here, else what tc said."""
    tc, cmds = _htb_cmds(exports, "node3", exports["SLURMLAB_ADDR_node4"], 1000)
    said = None
    for c in cmds:
        proc = subprocess.run(c, capture_output=True, text=True, timeout=10)
        if proc.returncode != 0:
            said = proc.stderr.strip()[:200] or f"exit {proc.returncode}"
            break
    subprocess.run([*tc, "qdisc", "del", "dev", exports["SLURMLAB_IF_node3"], "root"], capture_output=True, timeout=10)
    return said


def pair_figures(report: dict[str, Any]) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for n in report["nodes"]:
        for p in n["busbw_inter_gbps"]:
            key = (min(n["host"], p["peer"]), max(n["host"], p["peer"]))
            out[key] = p["gbps"]
    return out


def bench_scaling(env: dict[str, str], site: Path, repeat: int) -> list[dict[str, float]]:
    print(f"\n1. time of the check (median of {repeat}; seconds; start-up = import + init)")
    print(f"   {'nodes':>5} {'pairings':>8} {'total':>7} {'start-up':>9} {'import':>7} {'init':>6} {'measure':>8} "
          f"{'srun hostname':>14} {'srun import torch':>18}")
    rows: list[dict[str, float]] = []
    for n in range(2, NODES + 1):
        nodes = f"node[1-{n}]"
        figs: dict[str, list[float]] = {k: [] for k in ("total", "startup", "import", "init", "measure")}
        rounds = 0
        for _ in range(repeat):
            wall, rep = run_check(env, site, nodes)
            figs["total"].append(wall)
            for key, field in (("startup", "startup_s"), ("import", "import_s"), ("init", "init_s"),
                               ("measure", "measure_s")):
                figs[key].append(rep["perf"][field] or 0.0)
            rounds = len(rep["perf"]["pairings"])
        row = {k: statistics.median(v) for k, v in figs.items()}
        row["nodes"], row["rounds"] = n, rounds
        row["hostname"] = statistics.median(timed(["srun", "-p", "debug", "-N", str(n), "-w", nodes, "hostname"], env)
                                            for _ in range(repeat))
        row["torch"] = statistics.median(timed(["srun", "-p", "debug", "-N", str(n), "-w", nodes, sys.executable, "-c",
                                                "import torch"], env) for _ in range(repeat))
        rows.append(row)
        print(f"   {n:>5} {rounds:>8} {row['total']:>7.1f} {row['startup']:>9.1f} {row['import']:>7.1f} "
              f"{row['init']:>6.2f} {row['measure']:>8.1f} {row['hostname']:>14.1f} {row['torch']:>18.1f}")
    return rows


def estimate_512(rows: list[dict[str, float]], nodes: int = 512, gpus_per_node: int = 8) -> None:
    """The check's time on ``nodes`` nodes, part by part, from part 1's figures, as a range.

    low: every node does its own part at once, on its own CPUs (as real nodes do): a part costs
    what it cost where it was least shared (the 2-node figure; for the measurement, the 3-node
    figure: 3 pairings, one pair at a time), plus srun's growth as ``srun hostname`` grew.
    high: every node or rank adds what it added here, where all of them share 2 cores: each
    part's linear fit over the node counts measured (over ranks for the process group),
    extrapolated.  The testbed runs one task per node, so its ranks are its nodes.
    """
    ranks = nodes * gpus_per_node
    three = [r for r in rows if r["rounds"] >= 3] or rows
    xs = [r["nodes"] for r in rows]

    def fit(key: str, x: float) -> tuple[float, float]:
        line = statistics.linear_regression(xs, [r[key] for r in rows])
        return line.slope, max(0.0, line.intercept + line.slope * x)

    for r in rows:
        r["outside"] = max(0.0, r["total"] - r["startup"] - r["measure"])
    s_srun, srun_at = fit("hostname", nodes)
    parts: list[tuple[str, float, float, str]] = []
    s_out, out_hi = fit("outside", nodes)
    out_lo = rows[0]["outside"] + max(0.0, srun_at - rows[0]["hostname"])
    parts.append(("outside the tasks (CLI, srun, Python start)", out_lo, out_hi,
                  f"srun hostname {s_srun:+.3f} s/node; fit {s_out:+.3f} s/node"))
    s_imp, imp_hi = fit("import", nodes)
    parts.append(("imports", rows[0]["import"], imp_hi, f"fit {s_imp:+.3f} s/node"))
    s_init, init_hi = fit("init", ranks)
    parts.append(("process group, groups, barrier", rows[0]["init"], init_hi,
                  f"fit {s_init:+.3f} s/rank, {ranks} ranks"))
    s_meas, meas_hi = fit("measure", nodes)
    parts.append(("measurement (3 pairings, rounds constant)", three[0]["measure"], max(meas_hi, three[0]["measure"]),
                  f"fit {s_meas:+.3f} s/node"))
    parts.append(("total", sum(p[1] for p in parts), sum(p[2] for p in parts), ""))
    print(f"\n3. estimate for {nodes} nodes ({ranks} ranks: NCCL, {gpus_per_node} GPUs per node), seconds")
    print(f"   {'':<44} {'low':>7} {'high':>8}")
    for label, lo, hi, how in parts:
        print(f"   {label:<44} {lo:7.1f} {hi:8.1f}  {how}".rstrip())
    print("   low (the estimate for real nodes): each node's part at once on its own CPUs, as its least-shared"
          "\n   figure here (2 nodes; 3 for the measurement), plus srun's growth as `srun hostname` grew."
          "\n   high (a bound, not an expectation): each node (rank) adds what it added here, where all share"
          "\n   2 cores (linear fits over 2-5 nodes). Both assume the rounds stay 3 and the pairs"
          "\n   of a round do not slow each other (a non-blocking fabric). Not measured here: NCCL's communicator"
          "\n   set-up at 4096 ranks (at first use, inside the measurement), the rendezvous store's work per rank"
          "\n   at that scale, the world all-reduce's growth, GPU matmul and NCCL bandwidth (gloo on CPUs here).")


def bench_slow_link(env: dict[str, str], site: Path, exports: dict[str, str], fractions: list[float], repeat: int,
                    ratio: float) -> None:
    medians, lowest = [], []
    for _ in range(repeat):   # the others' bandwidth: the median pair of unthrottled runs
        figs = pair_figures(run_check(env, site, "node[1-5]")[1])
        medians.append(statistics.median(figs.values()))
        lowest.append(min(figs.values()) / medians[-1])
    ref = statistics.median(medians)
    target = ("node3", "node4")
    print(f"\n2. one link slowed (node3 -> node4 only) to a fraction of the median pair unthrottled "
          f"({ref:.2f} Gbit/s, median of {repeat} runs; lowest pair {' '.join(f'{x:.2f}' for x in lowest)} x median); "
          f"site slow_ratio {ratio:g}")
    print(f"   {'fraction':>8} {'htb Mbit/s':>10} {'node3-4 / median':>17} {'lowest other / median':>22} "
          f"{'named node3<->node4 only':>25} {'(pair below slow_ratio)':>24}")
    said = can_slow_link(exports)
    if said is not None:
        print(f"   not measured: one link cannot be slowed here (tc: {said})")
        return
    for f in fractions:
        mbit = f * ref * 1000
        seen, others, hits, below = [], [], 0, 0
        notes: list[str] = []
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
            below += seen[-1] < ratio
            if bad or named not in ([target], []) or (named == [] and seen[-1] < ratio):   # what was not expected
                flagged = [f"{n['host']} {n['status']} ({', '.join(c['check'] for c in n['checks'])})"
                           for n in rep["nodes"] if n["status"] != "ok"]
                notes.append(f"{f:.2f}: named links {['<->'.join(x) for x in named] or 'none'}, "
                             f"nodes not ok: {', '.join(flagged) or 'none'}")
        print(f"   {f:>8.2f} {mbit:>10.0f} {' '.join(f'{x:.2f}' for x in seen):>17} "
              f"{' '.join(f'{x:.2f}' for x in others):>22} {f'{hits} of {repeat}':>25} {f'({below} of {repeat})':>24}")
        for line in notes:
            print(f"            not exactly node3<->node4 at {line}")


def capture(env: dict[str, str], site_path: Path, exports: dict[str, str], out: Path, which: set[str]) -> None:
    """Raw figure lines of four runs, for the unit tests (one srun step each, as the CLI runs it)."""
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
    if "link" in which:
        with slow_link(exports, "node3", exports["SLURMLAB_ADDR_node4"], 500):
            one("node3-node4-link-500mbit", "node3's traffic to node4 only limited to 500 Mbit/s (tc htb class, "
                                            "u32 filter)")
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
    ap.add_argument("--fractions", default="0.2,0.4,0.5,0.6,0.7,0.8")
    ap.add_argument("--slow-ratio", type=float, default=0.5, help="the bench site's perf.slow_ratio")
    ap.add_argument("--capture", type=Path, help="also save raw figure lines of four runs here")
    ap.add_argument("--captures", default="healthy,node3,link,node2", help="which of the four")
    ap.add_argument("--only", choices=["scaling", "link", "capture", "example", "example-link"],
                    help="example: the plain output of one check with node3's interface limited to 100 Mbit/s; "
                         "example-link: with node3's traffic to node4 only limited to 500 Mbit/s (docs/admin.md's)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the testbed on the way out
    lab, tb_env, exports = start_testbed()
    work = Path(tempfile.mkdtemp(prefix="clusterkit-bench-"))
    site = work / "perf-bench.yaml"
    site.write_text(SITE % args.slow_ratio)
    env = login_env(lab, exports)
    env["CLUSTERKIT_STATE_DIR"] = str(work / "state")
    try:
        rows = bench_scaling(env, site, args.repeat) if args.only in (None, "scaling") else []
        if args.only in (None, "link"):
            bench_slow_link(env, site, exports, [float(x) for x in args.fractions.split(",")], args.repeat,
                            args.slow_ratio)
        if rows:
            estimate_512(rows)
        if args.only in ("example", "example-link"):
            fault = (_tbf(exports, "node3", 100) if args.only == "example"
                     else slow_link(exports, "node3", exports["SLURMLAB_ADDR_node4"], 500))
            with fault:
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
