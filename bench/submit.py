"""Submission and status costs on the Slurm testbed, clusterkit next to plain Slurm commands.

    python bench/submit.py [--repeat 10] [--jobs 200] [--slurm-conf PATH] [--only-submit]

Starts its own testbed (tests/slurm/testbed.sh, needs root) unless --slurm-conf points at a
running Slurm whose site file is ``testbed``.  Prints figures only; nothing is asserted.

1. The headline: submit -> RUNNING for one rendered job (srun launcher, one GPU, ``sleep``),
   each timed from process start until ``squeue`` says RUNNING:
   (a) ``clusterkit submit --site testbed --skip-preflight --no-wait`` as a new process, as
       users run it (it renders the job again, submits it through submitit, saves its record);
   (b) plain ``sbatch`` of the same job.sbatch, rendered once beforehand.
   One warm-up each, then --repeat alternating pairs; every job is cancelled and the queue
   left empty before the next one starts.  ``python -c pass`` and ``clusterkit --version`` rows
   show the interpreter's own start-up and the CLI's before any command module is imported.
2. The cost of one status poll: ``clusterkit status JOB``, its in-process query, ``squeue -j``.
3. Status of many jobs at once: clusterkit's batched query (calls made, wall time) next to
   one ``scontrol show job`` per job.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "toolkit"))

from clusterkit.scheduler.slurm.tables import SlurmQuery  # noqa: E402  (after the path is set)

JOB = ["--site", "testbed", "--gpus-per-node", "1", "--launcher", "srun"]
COMMAND = ["--", "sleep", "60"]


def free_base_port(count: int) -> int:
    """Below 20000: job scripts derive rendezvous ports from job ids in 20000-31999."""
    for _ in range(200):
        base = random.randrange(10000, 19000)
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
    lab.chmod(0o755)  # munged wants every directory above its socket world-executable
    env = dict(os.environ, SLURMLAB_DIR=str(lab), SLURMLAB_NODES="4", SLURMLAB_PORT=str(free_base_port(5)),
               SLURMLAB_FIRST_JOB_ID=str(random.randrange(1000, 60000) * 1000))
    env.pop("SLURM_CONF", None)
    t0 = time.perf_counter()
    subprocess.run(["bash", str(REPO / "tests/slurm/testbed.sh")], env=env, check=True, capture_output=True,
                   text=True, timeout=180)
    print(f"testbed started in {time.perf_counter() - t0:.1f} s (MariaDB, slurmdbd, slurmctld, 4 slurmd, warm-up)")
    return lab, env


def sh(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120, **kw)


def ck(*args: str) -> list[str]:
    """``clusterkit ARGS`` as users run it: a new interpreter (this checkout's package, by PYTHONPATH)."""
    return [sys.executable, "-m", "clusterkit", *args]


def wait_running(job: str, t0: float) -> float:
    """Seconds from ``t0`` until squeue reports the job RUNNING (or already past it)."""
    while True:
        state = sh(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip()
        if state in ("RUNNING", "COMPLETING", "COMPLETED", ""):
            return time.perf_counter() - t0
        time.sleep(0.005)


def cancel_and_drain(job: str) -> None:
    """Cancel the job and wait until the queue is empty, so every measurement starts alike."""
    sh(["scancel", job])
    deadline = time.monotonic() + 60
    while sh(["squeue", "-h", "-o", "%i"]).stdout.strip() and time.monotonic() < deadline:
        time.sleep(0.05)


def stats(vals: list[float]) -> tuple[float, float, float]:
    return statistics.median(vals) * 1000, min(vals) * 1000, max(vals) * 1000


class Timed:
    """One process, timed from its start: wall time until it exits, its own CPU time (user +
    system, which a busy machine inflates far less than wall time), and its stdout."""

    def __init__(self, argv: list[str], **kw: Any) -> None:
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            self.t0 = time.perf_counter()
            proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, **kw)
            _, status, usage = os.wait4(proc.pid, 0)
            self.wall = time.perf_counter() - self.t0
            proc.returncode = os.waitstatus_to_exitcode(status)
            self.cpu = usage.ru_utime + usage.ru_stime
            out.seek(0)
            err.seek(0)
            self.stdout, self.stderr = out.read(), err.read()
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{self.stdout}{self.stderr}")


def bench_headline(work: Path, repeat: int, env: dict[str, str]) -> None:
    # the job, rendered once: plain sbatch submits this very file every time
    sh(ck("render", *JOB, "--out", str(work / "rendered"), *COMMAND), cwd=REPO, env=env)
    script = work / "rendered" / "job.sbatch"
    Row = tuple[float, float, float]  # process returned, job RUNNING, process CPU time

    def run_ck(i: int) -> Row:
        p = Timed(ck("submit", *JOB, "--skip-preflight", "--no-wait", "--out", str(work / f"ck{i}"), *COMMAND),
                  cwd=REPO, env=env)
        found = re.search(r"Submitted job (\d+)", p.stdout)
        if found is None:
            raise SystemExit(f"clusterkit submit printed no job id:\n{p.stdout}{p.stderr}")
        t_run = wait_running(found[1], p.t0)
        cancel_and_drain(found[1])
        return p.wall, t_run, p.cpu

    def run_sbatch(i: int) -> Row:
        p = Timed(["sbatch", "--parsable", str(script)], cwd=script.parent, env=env)
        job = p.stdout.strip().split(";")[0]
        t_run = wait_running(job, p.t0)
        cancel_and_drain(job)
        return p.wall, t_run, p.cpu

    run_ck(-1)  # warm-up: page cache, bytecode cache, slurmctld's first contact with the client
    run_sbatch(-1)
    a: list[Row] = []
    b: list[Row] = []
    for i in range(repeat):
        a.append(run_ck(i))
        b.append(run_sbatch(i))
    py: list[Timed] = []
    version: list[Timed] = []
    for _ in range(repeat):
        py.append(Timed([sys.executable, "-c", "pass"], env=env))
        version.append(Timed(ck("--version"), cwd=REPO, env=env))

    print(f"\n1. submit -> RUNNING, same job.sbatch, {repeat} alternating runs after one warm-up each (ms)")
    print(f"   {'run':>3s} {'(a) ck returns':>15s} {'(a) ck RUNNING':>15s} {'(a) ck CPU':>11s} "
          f"{'(b) sbatch returns':>19s} {'(b) sbatch RUNNING':>19s}")
    for i, (ra, rb) in enumerate(zip(a, b, strict=True)):
        print(f"   {i:3d} {ra[0] * 1000:15.0f} {ra[1] * 1000:15.0f} {ra[2] * 1000:11.0f} "
              f"{rb[0] * 1000:19.0f} {rb[1] * 1000:19.0f}")
    print(f"\n   {'':50s} {'median':>7s} {'min':>7s} {'max':>7s}")
    rows = [("(a) clusterkit submit --skip-preflight --no-wait", [r[1] for r in a]),
            ("(b) sbatch job.sbatch", [r[1] for r in b]),
            ("    (a) process returned", [r[0] for r in a]),
            ("    (a) process CPU time (user+sys)", [r[2] for r in a]),
            ("    (b) process returned", [r[0] for r in b]),
            ("    python -c pass: returned", [t.wall for t in py]),
            ("    python -c pass: CPU time", [t.cpu for t in py]),
            ("    clusterkit --version (no command): returned", [t.wall for t in version]),
            ("    clusterkit --version (no command): CPU time", [t.cpu for t in version])]
    for name, vals in rows:
        med, lo, hi = stats(vals)
        print(f"   {name:50s} {med:7.0f} {lo:7.0f} {hi:7.0f}")
    ratio = statistics.median(r[1] for r in a) / statistics.median(r[1] for r in b)
    print(f"   ratio of the medians to RUNNING, (a) / (b): {ratio:.2f}x")
    print(f"   load average during the runs: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def bench_poll(work: Path, repeat: int, env: dict[str, str]) -> None:
    out = sh(ck("submit", *JOB, "--skip-preflight", "--out", str(work / "poll"), "--json", *COMMAND),
             cwd=REPO, env=env).stdout
    job = json.loads(out)["job_id"]
    timings: dict[str, list[float]] = {"clusterkit status JOB (CLI process)": [],
                                       "clusterkit SlurmQuery.states() in-process": [], "squeue -j JOB": []}
    q = SlurmQuery()
    for _ in range(repeat):
        t0 = time.perf_counter()
        sh(ck("status", job, "--json"), cwd=REPO, env=env)
        timings["clusterkit status JOB (CLI process)"].append(time.perf_counter() - t0)
        q = SlurmQuery()
        t0 = time.perf_counter()
        q.states([job])
        timings["clusterkit SlurmQuery.states() in-process"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        sh(["squeue", "-h", "-j", job])
        timings["squeue -j JOB"].append(time.perf_counter() - t0)
    cancel_and_drain(job)
    print(f"\n2. one status poll, median of {repeat} (ms); clusterkit makes {len(q.calls)} calls "
          f"({', '.join(c[0] for c in q.calls)}; sacct answers from the testbed's slurmdbd)")
    for name, vals in timings.items():
        print(f"   {name:48s} {statistics.median(vals) * 1000:8.0f}")


def bench_many(work: Path, njobs: int) -> None:
    ids = []
    for _ in range(njobs):  # plain, tiny jobs: the cost measured is the status query, not the jobs
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
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--slurm-conf", help="use this running Slurm instead of starting the testbed")
    ap.add_argument("--only-submit", action="store_true", help="the headline table only")
    args = ap.parse_args()
    lab, tb_env = (None, {}) if args.slurm_conf else start_testbed()
    os.environ["SLURM_CONF"] = args.slurm_conf or str(Path(str(lab)) / "etc/slurm.conf")
    work = Path(tempfile.mkdtemp(prefix="clusterkit-bench-"))
    work.chmod(0o755)  # the job's processes read the run directories
    # the CLI processes: this checkout's package, records in a directory of their own
    # Bytecode is cached (in the work directory) as for an installed package, whose .pyc files
    # pip writes: compiling clusterkit's sources on every start is no user's cost.
    env = dict(os.environ, CLUSTERKIT_STATE_DIR=str(work / "state"), PYTHONPYCACHEPREFIX=str(work / "pycache"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "toolkit"), os.environ.get("PYTHONPATH")])))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        bench_headline(work, args.repeat, env)
        if not args.only_submit:
            bench_poll(work, args.repeat, env)
            bench_many(work, args.jobs)
    finally:
        if lab is not None:
            subprocess.run(["bash", str(REPO / "tests/slurm/testbed.sh"), "--stop"], env=tb_env, capture_output=True,
                           timeout=120)
            shutil.rmtree(lab, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
