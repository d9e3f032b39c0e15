#!/usr/bin/env python3
"""Recovery on the Slurm testbed: from a fault to training resuming, in the allocation and
through the queue, and what the supervisor itself costs.

    python bench/recovery.py [--repeat 2] [--faults xid79,down,dead,link] [--healthy-minutes 2]
    python bench/recovery.py --faults "" --healthy-minutes 30     # the healthy run alone

Starts its own 5-node testbed (tests/slurm/testbed.sh, needs root) and runs the recovery tests'
training loop (tests/slurm/recovery_train.py: torch DDP over gloo on the CPU, a checkpoint every
3 steps) on 3 nodes.  Prints figures only; nothing is asserted.

For each fault, each policy, ``--repeat`` times:

* faults: ``xid79``: the rank on node2 prints a real Xid 79 capture and exits at step 8;
  ``down``: the node of rank 1 set DOWN (``scontrol update``) once rank 0 saved step 6;
  ``dead``: that node dies then (its slurmd and every process on it SIGKILLed);
  ``link``: that node's link set down in its network namespace then.  For these
  two, slurmctld's SlurmdTimeout is lowered to 15 s for the bench (300 s by default: on a real
  cluster, the time until Slurm calls the node down is that setting);
* policies: ``in-allocation``: ``--spares 1``: the supervisor drops node2 and relaunches on the
  spare; ``requeue``: ``--spares 0``: no spare, so the job goes back through the queue without
  node2 (what a job without clusterkit's in-allocation recovery gets at best: ``--requeue``
  and an ``--exclude`` someone has to write).

The time of the fault is when the bench saw it (the fault's line in the rank's log, polled
every 0.1 s, or the ``scontrol`` call); training resumed is when the first ``resumed at step``
line appeared.  The two differ by the detection (the launcher noticing), the diagnosis (doctor
on the attempt's logs), and the relaunch (or the requeue: Slurm's own requeue delay, the queue,
the new allocation's start).  The testbed's queue is empty: a real queue adds its wait to the
requeue figure only.

Then one healthy run of ``--healthy-minutes`` minutes: the supervisor's CPU seconds and peak
resident memory, read from /proc (the testbed's nodes share this machine's process table).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "toolkit"))
sys.path.insert(0, str(REPO))

import pytest  # noqa: E402  (the testbed harness is the tests' own)

from tests.conftest import CLI  # noqa: E402
from tests.slurm.conftest import CK, _started  # noqa: E402
from tests.slurm.test_recovery import _back, _kill_node, _revive, _slurmd_timeout  # noqa: E402
from tests.slurm.test_spares import _env, _site  # noqa: E402

TRAIN = REPO / "tests" / "slurm" / "recovery_train.py"
DEAD_AFTER_S = 15   # the SlurmdTimeout of the figures in docs/benchmarks.md (the tests use less)
XID79 = REPO / "tests" / "diagnose" / "corpus" / "akash-209-xid79.log"
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")
SUPERVISOR = b"clusterkit.supervise"


def logs(run_dir: Path) -> str:
    d = run_dir / "logs"
    return "".join(p.read_text(errors="replace") for p in sorted(d.glob("*.out"))) if d.is_dir() else ""


def wait_text(run_dir: Path, needle: str, timeout: float) -> float:
    """The monotonic time at which ``needle`` was first seen in the run's logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in logs(run_dir):
            return time.monotonic()
        time.sleep(0.1)
    raise RuntimeError(f"{needle!r} not in {run_dir}/logs after {timeout:.0f} s:\n{logs(run_dir)[-3000:]}")


def submit(ck: CK, site: Path, env: dict[str, str], run_dir: Path, spares: int, *train: str,
           limit_min: int | None = None) -> str:
    more = ["--set", f"time={limit_min // 60:02d}:{limit_min % 60:02d}:00"] if limit_min else []
    proc = ck("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "3", "--spares", str(spares),
              "--gpus-per-node", "1", "--launcher", "torchrun", "--run-name", f"bench-{time.time_ns()}", *more,
              "--out", str(run_dir), "--", "python", str(TRAIN), "--steps", "30", *train, env=env, timeout=180)
    if proc.code != 0:
        raise RuntimeError(f"submit failed: {proc.err[-2000:]}")
    m = re.search(r"Submitted (?:batch )?job (\d+)", proc.out)
    if not m:
        raise RuntimeError(f"no job id in: {proc.out[-1000:]}")
    return m.group(1)


def one(ck: CK, site: Path, env: dict[str, str], work: Path, fault: str, spares: int) -> tuple[float, str]:
    """Seconds from the fault to training resuming, and the job's end state."""
    run_dir = work / f"{fault}-{spares}-{time.time_ns()}"
    ck.bed.wait_idle(timeout=180)
    victim = "node2"
    try:
        if fault == "xid79":
            job = submit(ck, site, env, run_dir, spares, "--gpu-fault-on", "node2", "--gpu-fault-log", str(XID79))
            t_fault = wait_text(run_dir, "fallen off the bus", 300)
        else:
            job = submit(ck, site, env, run_dir, spares, "--step-s", "0.5")
            wait_text(run_dir, "rank 0 saved step 6", 300)
            # the node rank 1 runs on: Slurm may place the job on other nodes than node[1-3]
            m = re.search(r"^(?:\[rank1\]: )?rank 1/\d+ on (node\d+) ", logs(run_dir), re.M)   # torchrun's --tee prefix
            victim = m.group(1) if m else victim
            t_fault = time.monotonic()
            if fault == "down":
                ck.bed.run("scontrol", "update", f"NodeName={victim}", "State=DOWN", "Reason=clusterkit-bench")
            elif fault == "dead":
                _kill_node(ck.bed, victim)
            else:
                subprocess.run([*link(ck, victim), "down"], check=True, capture_output=True, timeout=10)
        t_resumed = wait_text(run_dir, "resumed at step", 600)
        end = ck.wait_for(job, lambda s: s["state"] in TERMINAL, timeout=600, what="the end")["state"]
        return t_resumed - t_fault, end
    finally:
        ck.bed.run("scancel", "--user", "root", check=False)
        if fault == "down":
            ck.bed.resume(victim)
        elif fault == "dead":
            _revive(ck.bed, victim)
        elif fault == "link":
            subprocess.run([*link(ck, victim), "up"], capture_output=True, timeout=10)
            _back(ck.bed, victim)


def link(ck: CK, node: str) -> list[str]:
    """``ip`` words that set ``node``'s link in its network namespace (``up`` or ``down`` follows)."""
    return ["ip", "-n", ck.bed.netns(node), "link", "set", ck.bed.iface(node)]


def supervisors() -> dict[int, tuple[float, int]]:
    """pid -> (CPU seconds, peak RSS in KiB) of every supervisor process now running."""
    out: dict[int, tuple[float, int]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if SUPERVISOR not in (d / "cmdline").read_bytes():
                continue
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / tick   # utime, stime
            hwm = next((int(ln.split()[1]) for ln in (d / "status").read_text().splitlines()
                        if ln.startswith("VmHWM:")), 0)
        except (OSError, ValueError, IndexError):
            continue
        out[int(d.name)] = (cpu, hwm)
    return out


def healthy(ck: CK, site: Path, env: dict[str, str], work: Path, minutes: float) -> None:
    steps = max(10, int(minutes * 60 / 0.5))
    run_dir = work / f"healthy-{time.time_ns()}"
    ck.bed.wait_idle(timeout=180)
    # a time limit past the run's length (the site's may be shorter: its warning would requeue the job)
    job = submit(ck, site, env, run_dir, 0, "--step-s", "0.5", "--steps", str(steps), limit_min=int(minutes) + 15)
    seen: dict[int, tuple[float, int]] = {}
    t0 = time.monotonic()
    try:
        while True:
            seen.update(supervisors())
            if ck.status(job)["state"] in TERMINAL:
                break
            time.sleep(1.0)
    finally:
        ck.bed.run("scancel", job, check=False)
    wall = time.monotonic() - t0
    if not seen:
        print("supervisor: no process seen (did the job start?)")
        return
    cpu, hwm = max(seen.values())
    print(f"healthy run of {wall / 60:.1f} min ({steps} steps): supervisor CPU {cpu:.2f} s "
          f"({100 * cpu / wall:.2f} % of one core), peak RSS {hwm / 1024:.1f} MiB (last sample before its end)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--faults", default="xid79,down")
    ap.add_argument("--healthy-minutes", type=float, default=2.0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="clusterkit-bench-recovery-"))
    work.chmod(0o755)  # the job's processes read the run directory
    try:
        with _started(5) as bed:
            ck = CK(bed=bed, state_dir=work / "state", runs=work / "runs", ck=CLI())
            env, site = _env(ck, work, set()), _site(work)
            print(f"{'fault':8} {'policy':32} {'fault -> resumed (s)':>22}   end states")
            by_policy: dict[int, list[float]] = {1: [], 0: []}
            for fault in filter(None, args.faults.split(",")):   # --faults "": the healthy run alone
                with _slurmd_timeout(ck.bed, DEAD_AFTER_S) if fault in ("dead", "link") else nullcontext():
                    for spares, policy in ((1, "in-allocation (1 spare)"), (0, "requeue (no spare, queue empty)")):
                        times, ends = [], []
                        for _ in range(args.repeat):
                            t, end = one(ck, site, env, work, fault, spares)
                            times.append(t)
                            ends.append(end)
                        by_policy[spares] += times
                        print(f"{fault:8} {policy:32} {statistics.median(times):14.1f} median "
                              f"({min(times):.1f}-{max(times):.1f})   {','.join(ends)}", flush=True)
            # the restart cost the checkpoint cadence rests on (docs/jobs.md, "How often to checkpoint")
            if by_policy[1] and by_policy[0]:
                inside, queued = (math.ceil(statistics.median(by_policy[k])) for k in (1, 0))
                print(f"for the cadence: clusterkit plan ... --restart-s {inside} (in the allocation), or "
                      f"--restart-s {queued} plus your queue's wait (requeue); or the site's reliability.restart_s")
            if args.healthy_minutes > 0:
                healthy(ck, site, env, work, args.healthy_minutes)
    except pytest.skip.Exception as e:
        print(f"the testbed cannot start here: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
