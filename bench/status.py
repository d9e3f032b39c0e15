"""`clusterkit status --limit 20` with 20 records and with 10,000 (a year of sweeps), in one run.

Each records directory holds ended local jobs (their final state cached, as status leaves
them) and two older jobs that have not ended (local jobs of another host: UNKNOWN, never
cached): status shows 22 rows of 10,000 records, and all 20 of 20.  Records are written as clusterkit writes them
(JobRecord JSON), without the fsync of a real submit, to keep the set-up short.

Rows, each a process of its own, timed (wall and CPU) with its peak memory (GNU time's %M):

* ``status``         - ``clusterkit status --limit 20 --json`` (the open index already built)
* ``status, first``  - the same on a directory without the open index (written by an older
  clusterkit): it reads every record once to build it
* ``read every``     - Python reading every record file as JobRecords (what status did)
* ``ls | tail | cat``- the shell's way to look at the newest 20 files
* ``python -c pass`` - the interpreter's own start-up, the floor
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = (20, 10_000)


def make_records(root: Path, count: int) -> Path:
    """``count`` records in ``root/state/jobs``, two of them still open."""
    from clusterkit.scheduler.records import JobRecord, RecordStore

    state = root / "state"
    store = RecordStore(state / "jobs")
    store.root.mkdir(parents=True)
    run_dir = root / "run"
    run_dir.mkdir()
    for n in range(count):
        is_open = n in (1, 3)
        rec = JobRecord(
            job_id=str(100_000 + n), scheduler="local", site="local", site_source="site_configs/local.yaml",
            stage="single-node", launcher="torchrun", job_name=f"sweep-{n}", nnodes=1, world_size=1,
            command=["python", "train.py", f"--lr={n}"], run_dir=str(run_dir), script=str(run_dir / "job.sh"),
            submitted_at=f"2026-{1 + n // 2000:02d}-01T{n % 2000 // 60 % 24:02d}:{n % 60:02d}:00.{n:06d}Z",
            host="other-host" if is_open else socket.gethostname(),
            plan={"nnodes": 1, "world_size": 1, "env": {"NCCL_DEBUG": "WARN"}, "grace_s": 60},
            state=None if is_open else "COMPLETED", exit_code=None if is_open else 0)
        store.path_for(rec).write_text(rec.model_dump_json(indent=2) + "\n")
    return state


def measured(argv: list[str], env: dict[str, str]) -> tuple[float, float, float, bytes]:
    """Wall seconds, CPU seconds and peak MiB of one run of ``argv``.

    GNU time starts ``argv`` and reports its figures: a child forked straight from this Python
    process would count this process's memory in its own high-water mark."""
    t0 = time.monotonic()
    proc = subprocess.Popen(["/usr/bin/time", "-f", "@@%M %U %S", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{argv}: exit {proc.returncode}: {err.decode(errors='replace')[-300:]}")
    kib, user, system = err.decode().rsplit("@@", 1)[1].split()
    return wall, float(user) + float(system), int(kib) / 1024, out


def best(argv: list[str], env: dict[str, str], repeat: int) -> tuple[float, float, float]:
    runs = [measured(argv, env) for _ in range(repeat)]
    return min(r[0] for r in runs), min(r[1] for r in runs), max(r[2] for r in runs)


READ_EVERY = ("import sys\nfrom clusterkit.scheduler.records import RecordStore\n"
              "good, bad = RecordStore().load_all()\nprint(len(good), len(bad))\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per row (best wall kept)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="record counts: the few, the many")
    args = ap.parse_args(argv)
    sizes = tuple(int(x) for x in args.sizes.split(","))
    load0 = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    rows: list[tuple[str, int, float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="ck-bench-status-") as tmp:
        for size in sizes:
            root = Path(tmp) / str(size)
            root.mkdir()
            state = make_records(root, size)
            env = {**os.environ, "CLUSTERKIT_STATE_DIR": str(state)}
            status = [sys.executable, "-m", "clusterkit", "status", "--limit", "20", "--json"]
            measured(status, env)  # builds the open index (first run)
            out = measured(status, env)[3]
            assert out.count(b'"job_id"') == (20 if size <= 20 else 22), out[:300]
            shutil.rmtree(state / "jobs" / ".open")  # as an older clusterkit left it
            first = [measured(status, env)]
            for _ in range(args.repeat - 1):
                shutil.rmtree(state / "jobs" / ".open")
                first.append(measured(status, env))
            rows.append(("status, first", size, min(f[0] for f in first), min(f[1] for f in first),
                         max(f[2] for f in first)))
            rows.append(("status", size, *best(status, env, args.repeat)))
            rows.append(("read every", size, *best([sys.executable, "-c", READ_EVERY], env, args.repeat)))
            shell = f"ls {state}/jobs | tail -n 20 | (cd {state}/jobs && xargs cat) | wc -c"
            rows.append(("ls | tail | cat", size, *best(["sh", "-c", shell], env, args.repeat)))
            rows.append(("python -c pass", size, *best([sys.executable, "-c", "pass"], env, args.repeat)))
            print(f"  {size} records done", file=sys.stderr, flush=True)
    load1 = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"status --limit 20; best of {args.repeat}; load average before: {load0}, after: {load1}")
    head = f"{'what':18} {'records':>8} {'wall s':>8} {'cpu s':>7} {'peak MiB':>9}"
    print(head)
    print("-" * len(head))
    for what, size, wall, cpu, mib in sorted(rows, key=lambda r: (r[0], r[1])):
        print(f"{what:18} {size:8} {wall:8.3f} {cpu:7.2f} {mib:9.1f}")
    by = {(w, s): (wall, cpu, mib) for w, s, wall, cpu, mib in rows}
    small, big = by[("status", sizes[0])], by[("status", sizes[-1])]
    ratio, cpu_ratio = big[0] / small[0], big[1] / max(small[1], 0.01)
    print(f"\nstatus with {sizes[-1]} records vs {sizes[0]}: {ratio:.2f}x the wall time, {cpu_ratio:.2f}x "
          f"the CPU (goal <= 1.3x: {'met' if ratio <= 1.3 else 'missed'}), {big[2]:.0f} MiB "
          f"(goal <= 50 MiB: {'met' if big[2] <= 50 else 'missed'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
