#!/usr/bin/env python3
"""What the supervisor itself costs over a long healthy run, on the local site (no Slurm needed).

    python bench/supervisor_cost.py [--minutes 30] [--step-s 0.5] [--ranks 2]

Submits, on the embedded ``local`` site, the recovery tests' training loop
(tests/slurm/recovery_train.py: torch DDP over gloo on the CPU, a checkpoint every 3 steps, each
step reported with ``clusterkit.progress`` so the supervisor watches progress files, not logs)
under torchrun with ``--ranks`` processes, for ``--minutes`` minutes.  Every second it reads from
/proc the supervisor's CPU time (user + system) and resident memory, and the ranks' CPU time for
scale.  Prints figures only; nothing is asserted.

The local site runs the same supervisor as a Slurm job (``python -m clusterkit.supervise``), but
not its stall watch (the progress files are read only for Slurm jobs, which can be recovered) nor
its ``scontrol`` calls: this measures its wait loop and signal handling over a long run;
bench/recovery.py's ``--healthy-minutes`` measures the whole of it, on the testbed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "tests" / "slurm" / "recovery_train.py"
SUPERVISOR = b"clusterkit.supervise"
TICK = os.sysconf("SC_CLK_TCK")


def sample(mark: bytes) -> tuple[dict[int, tuple[float, int]], dict[int, float]]:
    """(supervisor pid -> (CPU s, RSS KiB), rank pid -> CPU s) of this run's processes running now
    (those whose environment holds ``mark``: other jobs on the machine are not counted)."""
    sup: dict[int, tuple[float, int]] = {}
    ranks: dict[int, float] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
            if (SUPERVISOR not in cmd and str(TRAIN).encode() not in cmd) or mark not in (d / "environ").read_bytes():
                continue
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / TICK   # utime, stime
            rss = next((int(ln.split()[1]) for ln in (d / "status").read_text().splitlines()
                        if ln.startswith("VmRSS:")), 0)
        except (OSError, ValueError, IndexError):
            continue
        if SUPERVISOR in cmd:
            sup[int(d.name)] = (cpu, rss)
        elif str(TRAIN).encode() in cmd.split(b"\0")[1:3] and b"clusterkit" not in cmd:
            ranks[int(d.name)] = cpu   # a worker: python [-u] TRAIN ... (not torchrun's agent, the job shell or submit)
    return sup, ranks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--step-s", type=float, default=0.5)
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="clusterkit-bench-supervisor-"))
    steps = max(10, int(args.minutes * 60 / args.step_s))
    env = {**os.environ, "CLUSTERKIT_STATE_DIR": str(work / "state"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "toolkit"), os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-m", "clusterkit", "submit", "--site", "local", "--launcher", "torchrun",
            "--gpus-per-node", str(args.ranks), "--run-name", f"bench-{time.time_ns()}", "--out", str(work / "run"),
            "--no-snapshot", "--wait", "--set", f"time={int(args.minutes) + 10}",   # past the run: no time-limit end
            "--", "python", str(TRAIN), "--steps", str(steps), "--step-s", str(args.step_s),
            "--stall-on", "no-such-host"]   # --stall-on: the loop reports its progress; no host stalls
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=work)
    sup: dict[int, tuple[float, int]] = {}
    ranks: dict[int, float] = {}
    peak_rss = 0
    while proc.poll() is None:
        s, r = sample(f"CLUSTERKIT_STATE_DIR={work / 'state'}\0".encode())
        sup.update(s)
        ranks.update(r)
        peak_rss = max([peak_rss, *(rss for _, rss in s.values())])
        time.sleep(1.0)
    wall = time.monotonic() - t0
    out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    if proc.returncode != 0 or not sup:
        print(f"the job did not run as expected (exit {proc.returncode}, supervisor seen: {bool(sup)}):\n{out[-3000:]}")
        return 1
    cpu = max(c for c, _ in sup.values())
    rank_cpu = sum(ranks.values())
    print(f"local site, torchrun x {args.ranks} ranks, {steps} steps of {args.step_s} s, {wall / 60:.1f} min wall:")
    print(f"  supervisor: CPU {cpu:.2f} s ({100 * cpu / wall:.3f} % of one core), peak RSS {peak_rss / 1024:.1f} MiB")
    print(f"  the {len(ranks)} rank processes together: CPU {rank_cpu:.1f} s (last sample before each ended)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
