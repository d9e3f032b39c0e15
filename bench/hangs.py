#!/usr/bin/env python3
"""Benchmark: how soon clusterkit's supervisor finds a hang, and the smallest slow-down of one
rank it names, with real torch ranks (gloo over loopback, CPU) on this machine.

    python bench/hangs.py [--ranks 3] [--floor 10] [--repeat 3]

1. Hang: ``--ranks`` ranks step (a matmul, an all-reduce, ``clusterkit.progress(step,
   work_s=...)``); after 15 steps this script stops one rank (SIGSTOP), as a stopped or frozen
   process does.  The supervisor's watcher (``clusterkit.supervise.watch.Watcher``, the class
   the job's supervisor runs, with a stall floor of ``--floor`` s) watches the run's files; the
   figure is the time from the SIGSTOP to the found stall with its rank and node named, beside
   PyTorch's default process-group timeout (10 minutes for NCCL: until then every other rank
   waits in its collective and nothing ends).  Then the same with one rank stuck but alive
   before its next collective (a hung data loader): its heartbeat goes on and its step is the
   others', and it is named by where its training thread is (outside any collective while the
   others wait in one).
2. Slow-down: one rank does its work ``f`` times over, for ``f`` from 1.0 (none) to 2.0, in
   phases of 30 steps, ``--repeat`` times; after each phase the ranks' own progress files are
   judged (``clusterkit.supervise.ranks.stragglers``) at the default ratio (1.5) and at 1.2.
   The figure is the smallest ``f`` named in every repeat, with no other rank ever named.

3. No false alarm (``--healthy SECONDS``, e.g. 1200): the same ranks run that long with step
   times that vary fivefold (phases of 40 steps at 0.3, 1.5, 0.6, 1.0 and 0.45 s a step, the
   same schedule on every rank, each step ending in an all-reduce) and, every 400 steps, a
   checkpoint save of 20 s marked as such (``clusterkit.progress(step, saving=True)``): longer
   than ten of the slowest steps.  The watcher runs throughout with ``--floor``; the figure is
   the number of stalls it reported (a false alarm each), with the steps, saves and the limit
   it held at the end.

A link that drops every packet is not measured here (one machine's loopback cannot lose one
rank's link): the Slurm testbed's network namespaces can.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "toolkit"))

from clusterkit.supervise import ranks, stall, watch  # noqa: E402

FACTORS = (1.0, 1.1, 1.2, 1.3, 1.5, 2.0)
HEALTHY_STEPS_S = (0.3, 1.5, 0.6, 1.0, 0.45)   # phases of HEALTHY_PHASE steps: fivefold from fastest to slowest
HEALTHY_PHASE, SAVE_EVERY, SAVE_S = 40, 400, 20.0
PHASE = 30
TORCH_DEFAULT_S = 600


def healthy_schedule(seconds: float) -> list[float]:
    """Each step's time (a save: SAVE_S after the step that ends it), about ``seconds`` in all."""
    out: list[float] = []
    while sum(out) + SAVE_S * (len(out) // SAVE_EVERY) < seconds:
        out.append(HEALTHY_STEPS_S[len(out) // HEALTHY_PHASE % len(HEALTHY_STEPS_S)])
    return out


def worker(args: argparse.Namespace) -> int:
    """One rank (run by this script as ``--worker``)."""
    import torch
    import torch.distributed as dist

    import clusterkit

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if args.healthy:
        for step, took in enumerate(healthy_schedule(args.healthy), start=1):
            time.sleep(took)
            dist.all_reduce(torch.ones(1))
            clusterkit.progress(step, work_s=took)
            if step % SAVE_EVERY == 0:
                clusterkit.progress(step, saving=True)
                time.sleep(SAVE_S)
                dist.barrier()
        dist.destroy_process_group()
        return 0
    a = torch.randn(160, 160)
    gates = Path(args.gates)
    plan = [float(f) for f in args.plan.split(",")] if args.plan else []
    step = 0
    for phase in range(len(plan) if plan else 1):
        factor = plan[phase] if plan and rank == args.slow_rank else 1.0
        for _ in range(PHASE if plan else 100000):
            t0 = time.perf_counter()
            reps = round(20 * factor)
            for _ in range(reps):
                a = torch.tanh(a @ a / 160)
            work = time.perf_counter() - t0
            t = torch.ones(1)
            dist.all_reduce(t)
            step += 1
            clusterkit.progress(step, work_s=work)
            if not plan:
                time.sleep(0.05)
                while (gates / f"stuck{rank}").exists():   # stuck before its next collective, alive
                    time.sleep(0.5)
        if plan:   # the phase's end: a save line (written at once), then wait for the bench's gate
            clusterkit.progress(step, saving=True)
            while not (gates / f"go{phase}").exists():
                time.sleep(0.05)
            dist.barrier()
    dist.destroy_process_group()
    return 0


def start(n: int, tmp: Path, job: str, plan: str = "", slow_rank: int = -1,
          healthy: float = 0.0) -> list[subprocess.Popen[bytes]]:
    logs = tmp / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = {**os.environ, "RANK": str(r), "WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "CK_PROGRESS_FILE": str(logs / f"{job}.progress"),
               "SLURMD_NODENAME": f"node{r + 1}", "PYTHONPATH": str(REPO / "toolkit"), "OMP_NUM_THREADS": "1"}
        argv = [sys.executable, __file__, "--worker", "--gates", str(tmp), "--plan", plan,
                "--slow-rank", str(slow_rank), "--healthy", str(healthy)]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def end(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
        p.wait()


def hang(n: int, floor: float, fault: str) -> tuple[float, str]:
    """Seconds from the fault (``stop``: SIGSTOP of rank 1; ``stuck``: rank 1 waits, alive, before
    its next collective) to the stall found, and what the verdict says."""
    with tempfile.TemporaryDirectory() as d:
        tmp, job = Path(d), "4242"
        procs = start(n, tmp, job)
        try:
            lines: list[str] = []
            limits = stall.Limits(floor_s=floor, factor=10, warmup_steps=3, save_s=1800)
            w = watch.Watcher(limits, str(tmp), job, 0, 0, lines.append)
            while True:   # until every rank reports and the watcher is past its warm-up (rank 0 writes every 5 s)
                got = ranks.read_all(tmp / "logs", job)
                w.check()
                if len(got) == n and stall.limit_s(list(w.seen), limits) is not None:
                    break
                time.sleep(0.2)
            if fault == "stop":
                procs[1].send_signal(signal.SIGSTOP)
            else:
                (tmp / "stuck1").touch()
            stopped = time.monotonic()
            while (found := w.check()) is None:
                time.sleep(min(0.5, w.poll))
            took = time.monotonic() - stopped
            return took, watch.stalled_verdict(found, w.behind).summary
        finally:
            end(procs)


def slowdowns(n: int, repeat: int) -> dict[float, dict[float, int]]:
    """Per ratio, per factor: in how many repeats the slow rank alone was named (-1: another was)."""
    plan = ",".join(str(f) for f in FACTORS)
    named: dict[float, dict[float, int]] = {r: dict.fromkeys(FACTORS, 0) for r in (1.5, 1.2)}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as d:
            tmp, job = Path(d), "4343"
            procs = start(n, tmp, job, plan, slow_rank=1)
            try:
                for phase, f in enumerate(FACTORS):
                    while True:
                        got = ranks.read_all(tmp / "logs", job)
                        if len(got) == n and all(x.phase == "save" and x.step == PHASE * (phase + 1) for x in got):
                            break
                        if any(p.poll() not in (None, 0) for p in procs):
                            raise SystemExit("a rank failed")
                        time.sleep(0.1)
                    for ratio, counts in named.items():
                        who = {x.rank for x in ranks.stragglers(got, ratio)}
                        if who - {1}:
                            counts[f] = -1
                        elif who == {1} and counts[f] >= 0:
                            counts[f] += 1
                    (tmp / f"go{phase}").touch()
            finally:
                end(procs)
    return named


def no_false_alarm(n: int, floor: float, seconds: float) -> int:
    """Run the healthy schedule with the watcher on; print what it reported."""
    sched = healthy_schedule(seconds)
    saves = len(sched) // SAVE_EVERY
    print(f"{n} torch ranks (gloo, CPU), {len(sched)} steps of {min(sched):g} to {max(sched):g} s, {saves} save(s) "
          f"of {SAVE_S:g} s, about {seconds / 60:.0f} min; stall floor {floor:g} s, factor 10", flush=True)
    with tempfile.TemporaryDirectory() as d:
        tmp, job = Path(d), "4444"
        procs = start(n, tmp, job, healthy=seconds)
        alarms: list[str] = []
        t0, limits = time.monotonic(), stall.Limits(floor_s=floor, factor=10, warmup_steps=3, save_s=1800)
        highest = 0.0
        try:
            w = watch.Watcher(limits, str(tmp), job, 0, 0, lambda _: None)
            while any(p.poll() is None for p in procs):
                found = w.check()
                if found is not None:
                    alarms.append(f"{time.monotonic() - t0:.0f} s: {watch.stalled_verdict(found, w.behind).summary}")
                    w = watch.Watcher(limits, str(tmp), job, 0, len(alarms), lambda _: None)
                highest = max(highest, stall.limit_s(list(w.seen), limits) or 0.0)
                time.sleep(min(0.5, w.poll))
            codes = [p.wait() for p in procs]
        finally:
            end(procs)
        last = ranks.read_all(tmp / "logs", job)
    took = time.monotonic() - t0
    print(f"ran {took / 60:.1f} min, ranks exited {codes}, last step {max((x.step for x in last), default=0)}; "
          f"highest stall limit held {highest:.1f} s")
    print(f"false alarms: {len(alarms)}" + "".join(f"\n  {a}" for a in alarms))
    return 1 if alarms or any(codes) else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=3)
    p.add_argument("--floor", type=float, default=10.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--healthy", type=float, default=0.0, metavar="SECONDS",
                   help="run the no-false-alarm check for this long instead")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--gates", help=argparse.SUPPRESS)
    p.add_argument("--plan", default="", help=argparse.SUPPRESS)
    p.add_argument("--slow-rank", type=int, default=-1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("bench/hangs.py needs torch (pip install torch, CPU build)", file=sys.stderr)
        return 2
    if args.healthy:
        return no_false_alarm(args.ranks, args.floor, args.healthy)
    print(f"{args.ranks} torch ranks (gloo, CPU) on this machine; stall floor {args.floor:g} s\n")
    print(f"{'fault':<36}{'clusterkit found it':>22}{'PyTorch default timeout':>26}")
    verdicts = []
    for fault, name in (("stop", "SIGSTOP of one rank"), ("stuck", "one rank stuck, alive")):
        for i in range(args.repeat):
            took, said = hang(args.ranks, args.floor, fault)
            print(f"{name + f' (run {i + 1})':<36}{took:>20.1f} s{TORCH_DEFAULT_S:>24} s", flush=True)
            verdicts.append(f"{name} (run {i + 1}): {said}")
    print(f"{'link drop of one node':<36}{'not measured here':>22}{TORCH_DEFAULT_S:>24} s")
    print("verdicts:\n  " + "\n  ".join(verdicts) + "\n")
    named = slowdowns(args.ranks, args.repeat)
    print(f"one rank slowed, {PHASE} steps per phase, {args.repeat} repeat(s): times named (of {args.repeat})")
    print(f"{'slow-down':<12}" + "".join(f"{'ratio ' + format(r, 'g'):>12}" for r in named))
    for f in FACTORS:
        print(f"{f:<12g}" + "".join(f"{('another rank!' if c[f] < 0 else str(c[f])):>12}" for c in named.values()))
    for r, c in named.items():
        ok = [f for f in FACTORS if f > 1 and all(c[g] == args.repeat for g in FACTORS if g >= f)]
        false = any(v < 0 for v in c.values()) or c[1.0] > 0
        print(f"ratio {r:g}: smallest slow-down named every time: {min(ok) if ok else 'none'}"
              f"{'; a wrong rank was named' if false else '; no wrong rank named'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
