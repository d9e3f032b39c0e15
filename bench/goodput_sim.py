#!/usr/bin/env python3
"""Simulation: effective training time (ETTR) of a long run at 1,024 to 16,384 GPUs.

    python bench/goodput_sim.py [--rate 1.97e-5] [--save 60] [--restart-alloc 120]
                                [--restart-queue 1800] [--spares-per-100 3] [--failures 20000] [--seed 1]

Failures arrive as a Poisson process at ``rate`` per GPU-hour (default: the Llama 3 report's
1.97e-5).  Each one loses the work since the last completed checkpoint and costs a restart:

* ``requeue``: every failure goes back through the queue (``--restart-queue`` seconds: the
  wait for a new allocation plus the start-up), as a job that ends FAILED and is resubmitted;
* ``in-allocation``: the supervisor drops the failed node and relaunches on a spare in the
  same allocation (``--restart-alloc`` seconds); when the spares (``--spares-per-100`` per 100
  nodes of 8 GPUs, at least one) are used up, the next failure requeues, and the new
  allocation comes with a fresh set of spares.

For each scale and each checkpoint interval (Daly's optimum, and half and twice it) it prints
the simulated ETTR of both policies over ``--failures`` failures (a run long enough for the
average to settle: at 1,024 GPUs 20,000 failures are over 100 years of wall time), and for the
two pure cases (every restart at one cost) the closed form (``clusterkit.job.goodput.expected_ettr``,
Daly's model) beside it: the simulation checks the closed form (exit status 1 past 1 %).

The restart costs are inputs, not measurements: pass the ones your cluster shows (the
in-allocation figure from ``bench/recovery.py`` (17-21 s on the testbed), the requeue figure from your
queue's wait times).  The defaults (2 min, 30 min) are assumptions, said as such in the output.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "toolkit"))

from clusterkit.job import goodput  # noqa: E402

SCALES = (1024, 2048, 4096, 8192, 16384)
GPUS_PER_NODE = 8


def simulate(gpus: int, rate: float, interval: float, save: float, restarts: tuple[float, float],
             spares: int, failures: int, rng: random.Random) -> float:
    """ETTR of one run over ``failures`` failures.  ``restarts``: (in the allocation, through the
    queue); ``spares`` < 0: every failure takes the first cost (no spare ever runs out)."""
    mtbf = goodput.mtbf_s(gpus, rate)
    r_alloc, r_queue = restarts
    left = spares
    wall = kept = 0.0
    restart = 0.0               # the cost of the restart in front of the next segment (none at first)
    for _ in range(failures):
        t = rng.expovariate(1.0 / mtbf)          # time to the next failure, from the last one
        if t < restart:                          # it struck during the restart: start it again
            wall += t
        else:
            work = t - restart
            kept += math.floor(work / (interval + save)) * interval
            wall += t
        if spares < 0:
            restart = r_alloc
        elif left > 0:
            left -= 1
            restart = r_alloc
        else:
            left = spares                        # the new allocation brings its spares again
            restart = r_queue
    return kept / wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=goodput.LLAMA3_FAILURES_PER_GPU_HOUR)
    ap.add_argument("--save", type=float, default=60.0, help="seconds one checkpoint save takes")
    ap.add_argument("--restart-alloc", type=float, default=120.0, help="seconds to relaunch on a spare")
    ap.add_argument("--restart-queue", type=float, default=1800.0, help="seconds from a requeue to training")
    ap.add_argument("--spares-per-100", type=float, default=3.0, help="spare nodes per 100 nodes (at least 1)")
    ap.add_argument("--failures", type=int, default=20000, help="failures simulated per figure")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)

    def _inputs(a: argparse.Namespace) -> str:
        """The restart costs are assumptions unless given (then, as measured where they came from)."""
        return "assumed inputs" if (a.restart_alloc, a.restart_queue) == (120.0, 1800.0) else "given"

    print(f"failures {args.rate:g}/GPU-hour; saves {args.save:g} s; restart {args.restart_alloc:g} s on a spare, "
          f"{args.restart_queue:g} s through the queue ({_inputs(args)}); {args.failures} failures per figure; "
          f"spares {args.spares_per_100:g} per 100 nodes")
    head = (f"{'GPUs':>6} {'MTBF':>7} {'interval':>15} {'requeue sim':>11} {'closed':>7} {'diff':>6} "
            f"{'in-alloc sim':>12} {'closed':>7} {'diff':>6} {'+spares sim':>11} {'spares':>6}")
    print(head)
    print("-" * len(head))
    worst = 0.0
    for gpus in SCALES:
        mtbf = goodput.mtbf_s(gpus, args.rate)
        best = goodput.daly_interval_s(args.save, mtbf)
        spares = max(1, round(gpus / GPUS_PER_NODE * args.spares_per_100 / 100))
        for label, tau in (("daly", best), ("half", best / 2), ("twice", best * 2)):
            row = []
            for restart in (args.restart_queue, args.restart_alloc):
                sim = simulate(gpus, args.rate, tau, args.save, (restart, restart), -1, args.failures, rng)
                closed = goodput.expected_ettr(tau, args.save, restart, mtbf)
                worst = max(worst, abs(sim - closed) / closed)
                row.append((sim, closed))
            mixed = simulate(gpus, args.rate, tau, args.save, (args.restart_alloc, args.restart_queue),
                             spares, args.failures, rng)
            (rq, rqc), (ra, rac) = row
            print(f"{gpus:>6} {mtbf / 3600:>6.1f}h {tau / 60:>7.1f}m {label:<6} {rq:>11.2%} {rqc:>7.2%} "
                  f"{(rq - rqc) / rqc:>+6.2%} {ra:>12.2%} {rac:>7.2%} {(ra - rac) / rac:>+6.2%} "
                  f"{mixed:>11.2%} {spares:>6}")
    print(f"largest difference between simulation and closed form: {worst:.2%}")
    return 0 if worst < 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
