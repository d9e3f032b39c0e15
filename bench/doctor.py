#!/usr/bin/env python3
"""Benchmark: ``clusterkit doctor`` over 512 rank logs of 2 MB each, next to ``grep -E``.

    python bench/doctor.py [--ranks 512] [--mb 2] [--repeat 2] [--keep DIR]

Generates one job's logs as srun writes them with one task per GPU (``<job>.r0.rank<N>.out``):
training steps, DeepSpeed and NCCL INFO chatter, and, in rank 317 only, a CUDA out-of-memory
traceback in the middle of the file; every other rank ends with NCCL watchdog timeouts (the
cascade).  Then times, in one run and on the same files:

* ``clusterkit doctor --logs DIR --json`` (a fresh process: start-up included), checking that
  it names rank 317 and ``gpu-oom``;
* ``grep -E -n`` with the same signatures (the catalogue's pattern, translated to ERE).

Prints wall time (best of ``--repeat``, files in the page cache after the first pass) and peak
resident memory of each (GNU time's ``%M``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "toolkit"))

from clusterkit.diagnose import catalogue, reader  # noqa: E402

JOB = 880001
BAD_RANK = 317
GNU_TIME = "/usr/bin/time"   # GNU time (apt-get install time): peak RSS of a child, measured alone
STEP = ("[rank{R}]:[2026-12-01 10:{M:02d}:{S:02d},{MS:03d}] step {N} | loss {L:.4f} | lr 2.9e-04 | "
        "grad_norm {G:.3f} | tokens/s 38412 | mem_alloc 61.2GiB | mem_reserved 70.4GiB\n")
DS = ("[2026-12-01 10:{M:02d}:{S:02d},{MS:03d}] [INFO] [logging.py:128:log_dist] [Rank 0] step={N}, "
      "skipped=0, lr=[0.00029], mom=[(0.9, 0.95)]\n")
NCCL = "gpu{H:03d}:48211:48390 [{D}] NCCL INFO Channel {C:02d}/0 : {R}[{D}] -> {P}[{D}] via P2P/IPC/read\n"
OOM = """\
[rank317]: Traceback (most recent call last):
[rank317]:   File "/home/ana/llm/train.py", line 211, in <module>
[rank317]:     loss.backward()
[rank317]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.11 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.86 GiB memory in use.
"""
WATCHDOG = ("[rank{R}]:[E1201 10:40:07.551230112 ProcessGroupNCCL.cpp:616] [Rank {R}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=9120, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, "
            "Timeout(ms)=600000) ran for 600042 milliseconds before timing out.\n")


def body(size: int) -> str:
    """About ``size`` bytes of a healthy rank's log, with ``{R}`` where the rank goes."""
    out, n, i = [], 0, 0
    while n < size:
        t = dict(M=(i // 600) % 60, S=(i // 10) % 60, MS=(i * 37) % 1000, N=i, L=2.5 - i * 1e-5, G=0.8 + (i % 7) / 10,
                 H=i % 64 + 1, D=i % 8, C=i % 32, P="{P}")
        line = STEP.format(R="{R}", **t) if i % 10 else (DS.format(**t) if i % 20 else NCCL.format(R="{R}", **t))
        out.append(line)
        n += len(line)
        i += 1
    return "".join(out)


def generate(root: Path, ranks: int, size: int, bad: int) -> int:
    logs = root / "logs"
    logs.mkdir(parents=True)
    text = body(size)
    half = text.index("\n", len(text) // 2) + 1
    total = 0
    for r in range(ranks):
        own = text.replace("{R}", str(r)).replace("{P}", str((r + 1) % ranks))
        tail = OOM.replace("rank317", f"rank{r}") if r == bad else WATCHDOG.format(R=r)
        data = (own[:half] + tail + own[half:]) if r == bad else own + tail
        (logs / f"{JOB}.r0.rank{r}.out").write_text(data)
        total += len(data)
    return total


def to_ere(pattern: str) -> str:
    """The catalogue's pattern (Python re / RE2) in grep -E's dialect."""
    return pattern.replace("(?:", "(").replace(r"\d", "[0-9]")


def measure(argv: list[str]) -> tuple[float, float, bytes]:
    """(seconds, peak RSS in MB, stdout) of one child process.

    Peak RSS comes from GNU time: a child forked straight from this (large) Python process
    would report this process's size as its own peak, since maxrss counts the pages before exec.
    """
    t0 = time.perf_counter()
    proc = subprocess.run([GNU_TIME, "-f", "CK_MAXRSS_KB %M", *argv], capture_output=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO / "toolkit")})
    secs = time.perf_counter() - t0
    m = re.search(rb"CK_MAXRSS_KB (\d+)", proc.stderr)
    if not m:
        raise SystemExit(f"{argv[0]} failed: {proc.stderr[-500:].decode(errors='replace')}")
    return secs, int(m.group(1)) / 1024, proc.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--mb", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--keep", type=Path, help="generate into this directory and keep it")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="ck-bench-doctor-"))
    try:
        t0 = time.perf_counter()
        bad = BAD_RANK if args.ranks > BAD_RANK else args.ranks // 2
        total = generate(root, args.ranks, int(args.mb * (1 << 20)), bad)
        print(f"generated {args.ranks} rank logs, {total / (1 << 20):.0f} MB in {time.perf_counter() - t0:.1f} s "
              f"(failure buried in rank {bad}); doctor's regex engine: {reader.ENGINE}")
        files = sorted(str(p) for p in (root / "logs").iterdir())
        doctor = [sys.executable, "-m", "clusterkit", "doctor", "--logs", str(root / "logs"), "--json"]
        grep = ["grep", "-E", "-n", to_ere(catalogue.trigger_pattern()), *files]
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.repeat):
            for name, argv in (("grep -E", grep), ("clusterkit doctor", doctor)):
                secs, rss, out = measure(argv)
                if name == "clusterkit doctor":
                    v = json.loads(out)["verdict"]
                    assert (v["category"], v["rank"]) == ("gpu-oom", bad), v
                elif not re.search(rb"rank%d\.out:\d+:\[rank%d\]: torch\.OutOfMemoryError" % (bad, bad), out):
                    raise SystemExit("grep did not find the buried failure: the ERE translation is wrong")
                prev = best.get(name)
                best[name] = (min(secs, prev[0]) if prev else secs, max(rss, prev[1]) if prev else rss)
        g, d = best["grep -E"], best["clusterkit doctor"]
        print(f"{'tool':<20}{'wall s':>10}{'peak RSS MB':>14}{'MB/s':>10}")
        for name, (secs, rss) in best.items():
            print(f"{name:<20}{secs:>10.2f}{rss:>14.1f}{total / (1 << 20) / secs:>10.0f}")
        print(f"doctor / grep wall time: {d[0] / g[0]:.2f}x  (verdict: gpu-oom, rank {bad})")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
