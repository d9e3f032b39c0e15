"""Submission and status costs on the Slurm testbed, clusterkit next to plain Slurm commands.

    python bench/submit.py [--repeat 5] [--jobs 200] [--slurm-conf PATH]

Starts its own testbed (tests/slurm/testbed.sh, needs root) unless --slurm-conf points at a
running Slurm.  Prints three tables:

1. submit-to-RUNNING latency for the same rendered job.sbatch: ``clusterkit submit`` (a new
   process, as a user runs it), clusterkit's submit function in-process (submitit + sbatch),
   and plain ``sbatch``;
2. the cost of one status poll: ``clusterkit status JOB``, its in-process query, ``squeue -j``;
3. status of many jobs at once: clusterkit's batched query (calls made, wall time) next to
   one ``scontrol show job`` per job.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "toolkit"))

from clusterkit.scheduler.slurm import submit_slurm  # noqa: E402
from clusterkit.scheduler.slurm_tables import SlurmQuery  # noqa: E402


def free_base_port(count: int) -> int:
    for _ in range(200):
        base = random.randrange(20000, 28000)
        ok = True
        for p in range(base, base + count):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise SystemExit("no free ports for the testbed")


def start_testbed() -> tuple[Path, dict[str, str]]:
    lab = Path(tempfile.mkdtemp(prefix="clusterkit-bench-slurm-"))
    lab.chmod(0o755)
    env = dict(os.environ, SLURMLAB_DIR=str(lab), SLURMLAB_PORT=str(free_base_port(5)),
               SLURMLAB_FIRST_JOB_ID=str(random.randrange(1000, 60000) * 1000))
    env.pop("SLURM_CONF", None)
    t0 = time.perf_counter()
    subprocess.run(["bash", str(REPO / "tests/slurm/testbed.sh")], env=env, check=True, capture_output=True, text=True)
    print(f"testbed started in {time.perf_counter() - t0:.1f} s (munge, slurmctld, 4 slurmd, warm-up job)")
    return lab, env


def sh(argv: list[str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=True, **kw)


def wait_running(job: str, t0: float) -> float:
    while True:
        state = sh(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip()
        if state in ("RUNNING", "COMPLETING", "COMPLETED", ""):
            return time.perf_counter() - t0
        time.sleep(0.02)


def render(run_dir: Path) -> Path:
    sh([sys.executable, "-m", "clusterkit", "render", "--site", "testbed", "--gpus-per-node", "1",
        "--launcher", "srun", "--out", str(run_dir), "--", "sleep", "30"], cwd=REPO)
    return run_dir / "job.sbatch"


def bench_latency(work: Path, repeat: int, state_env: dict[str, str]) -> None:
    rows: dict[str, list[tuple[float, float]]] = {"clusterkit submit (CLI process)": [],
                                                  "clusterkit submit_slurm() in-process": [], "sbatch job.sbatch": []}
    for i in range(repeat):
        # CLI: render + submitit + sbatch + record, as a user types it
        t0 = time.perf_counter()
        out = sh([sys.executable, "-m", "clusterkit", "submit", "--site", "testbed", "--gpus-per-node", "1",
                  "--launcher", "srun", "--out", str(work / f"cli{i}"), "--json", "--", "sleep", "30"],
                 cwd=REPO, env=state_env).stdout
        t_ret = time.perf_counter() - t0
        job = __import__("json").loads(out)["job_id"]
        rows["clusterkit submit (CLI process)"].append((t_ret, wait_running(job, t0)))
        sh(["scancel", job])
        # in-process: the same script through submitit
        script = render(work / f"fn{i}")
        text = script.read_text()
        t0 = time.perf_counter()
        job = submit_slurm(script.parent, text)
        rows["clusterkit submit_slurm() in-process"].append((time.perf_counter() - t0, wait_running(job, t0)))
        sh(["scancel", job])
        # plain sbatch of the same rendered script
        script = render(work / f"sb{i}")
        t0 = time.perf_counter()
        job = sh(["sbatch", "--parsable", str(script)]).stdout.strip()
        rows["sbatch job.sbatch"].append((time.perf_counter() - t0, wait_running(job, t0)))
        sh(["scancel", job])
    print(f"\n1. submit -> RUNNING latency, median of {repeat} (ms)")
    print(f"   {'':40s} {'submit returns':>15s} {'job RUNNING':>12s}")
    for name, vals in rows.items():
        print(f"   {name:40s} {statistics.median(v[0] for v in vals) * 1000:15.0f} "
              f"{statistics.median(v[1] for v in vals) * 1000:12.0f}")


def bench_poll(work: Path, repeat: int, state_env: dict[str, str]) -> None:
    out = sh([sys.executable, "-m", "clusterkit", "submit", "--site", "testbed", "--gpus-per-node", "1",
              "--launcher", "srun", "--out", str(work / "poll"), "--json", "--", "sleep", "60"],
             cwd=REPO, env=state_env).stdout
    job = __import__("json").loads(out)["job_id"]
    timings: dict[str, list[float]] = {"clusterkit status JOB (CLI process)": [],
                                       "clusterkit SlurmQuery.states() in-process": [], "squeue -j JOB": []}
    for _ in range(repeat):
        t0 = time.perf_counter()
        sh([sys.executable, "-m", "clusterkit", "status", job, "--json"], cwd=REPO, env=state_env)
        timings["clusterkit status JOB (CLI process)"].append(time.perf_counter() - t0)
        q = SlurmQuery()
        t0 = time.perf_counter()
        q.states([job])
        timings["clusterkit SlurmQuery.states() in-process"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        sh(["squeue", "-h", "-j", job])
        timings["squeue -j JOB"].append(time.perf_counter() - t0)
    sh(["scancel", job])
    print(f"\n2. one status poll, median of {repeat} (ms); clusterkit makes {len(q.calls)} calls "
          f"({', '.join(c[0] for c in q.calls)}) where sacct is disabled")
    for name, vals in timings.items():
        print(f"   {name:48s} {statistics.median(vals) * 1000:8.0f}")


def bench_many(work: Path, njobs: int) -> None:
    ids = []
    for i in range(njobs):  # plain, tiny jobs: the cost measured is the status query, not the jobs
        ids.append(sh(["sbatch", "--parsable", "-o", str(work / "many-%j.out"), "--wrap", "true"]).stdout.strip())
    q = SlurmQuery()
    t0 = time.perf_counter()
    states = q.states(ids)
    t_ck = time.perf_counter() - t0
    t0 = time.perf_counter()
    for jid in ids:
        sh(["scontrol", "-o", "show", "job", jid])
    t_each = time.perf_counter() - t0
    print(f"\n3. status of {njobs} jobs")
    print(f"   {'clusterkit SlurmQuery.states(all ids)':48s} {len(q.calls):4d} calls {t_ck * 1000:8.0f} ms"
          f"   ({len(states)} jobs answered)")
    print(f"   {'scontrol show job ID, once per job':48s} {njobs:4d} calls {t_each * 1000:8.0f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--slurm-conf", help="use this running Slurm instead of starting the testbed")
    args = ap.parse_args()
    lab, tb_env = (None, {}) if args.slurm_conf else start_testbed()
    os.environ["SLURM_CONF"] = args.slurm_conf or str(lab / "etc/slurm.conf")  # type: ignore[operator]
    work = Path(tempfile.mkdtemp(prefix="clusterkit-bench-"))
    work.chmod(0o755)
    state_env = dict(os.environ, CLUSTERKIT_STATE_DIR=str(work / "state"))
    try:
        bench_latency(work, args.repeat, state_env)
        bench_poll(work, args.repeat, state_env)
        bench_many(work, args.jobs)
    finally:
        if lab is not None:
            subprocess.run(["bash", str(REPO / "tests/slurm/testbed.sh"), "--stop"], env=tb_env, capture_output=True)
            shutil.rmtree(lab, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
