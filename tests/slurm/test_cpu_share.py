"""CPUs per job step, read back from Slurm on the testbed.

Since Slurm 22.05 srun is not meant to inherit ``--cpus-per-task`` from sbatch: without the flag
on the srun line each task of the launch step gets one CPU.  The testbed does not bind CPUs, so
the tests read the step's CPU count from Slurm itself (``scontrol show step`` and the step's
``SLURM_CPUS_PER_TASK``), written by the running job.

The testbed's srun (Debian's 22.05.8) still picks up the batch shell's ``SLURM_CPUS_PER_TASK``,
which would hide a missing flag.  So the jobs run with a wrapper named ``srun`` first on PATH
that drops that variable and execs the real srun: the srun of releases and site profiles where
nothing is inherited.  Only the flag on the srun line can then give the step its CPUs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from .conftest import CK

pytest.importorskip("torch", reason="the job script runs a gloo all-reduce (pip install torch, CPU build)")

JOB = "tests/slurm/cpu_share_job.py"


def _srun_without_inheritance(directory: Path) -> Path:
    real = shutil.which("srun")
    assert real, "srun not on PATH"
    directory.mkdir(parents=True)
    wrapper = directory / "srun"
    wrapper.write_text(f"#!/bin/bash\nunset SLURM_CPUS_PER_TASK\nexec {shlex.quote(real)} \"$@\"\n")
    wrapper.chmod(0o755)
    return directory


def _submit(cli: CK, name: str, *args: str) -> tuple[Path, list[dict]]:
    run_dir, out = cli.runs / name, cli.runs / f"{name}-out"
    out.mkdir(parents=True)
    out.chmod(0o777)
    shim = _srun_without_inheritance(cli.runs / f"{name}-bin")
    env = cli.env()
    env["PATH"] = f"{shim}{os.pathsep}{env['PATH']}"
    proc = cli("submit", "--site", "testbed", *args, "--out", str(run_dir), "--wait", "--", "python", JOB, str(out),
               env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    return out, ranks


def _field(text: str, name: str) -> str:
    m = re.search(rf"\b{name}=(\S+)", text)
    assert m, f"no {name}= in:\n{text}"
    return m.group(1)


def test_partial_node_torchrun_step_gets_its_share(cli: CK) -> None:
    # testbed nodes: 8 CPUs, 8 GPUs, 62 GB; 2 of 8 GPUs -> 2 CPUs and 15872 MB per node
    out, ranks = _submit(cli, "cpus-torchrun", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "2",
                         "--launcher", "torchrun")
    assert len(ranks) == 4
    # one torchrun task per node with 2 CPUs; each of its 2 ranks sees the task's count, OMP one each
    assert {(r["cpus_per_task"], r["omp_num_threads"], r["cpus_per_task_sum"]) for r in ranks} == {("2", "1", 8)}
    assert len({r["step"] for r in ranks}) == 1                 # all ranks in the one launch step
    step = (out / "step.txt").read_text()
    assert re.search(r"TRES=cpu=4\b", step), step             # 2 nodes x 1 task x 2 CPUs
    job = (out / "job.txt").read_text()
    assert _field(job, "NumCPUs") == "4" and _field(job, "MinMemoryNode") == "15.50G"


def test_srun_launcher_tasks_get_cpus_per_task_setting(cli: CK) -> None:
    out, ranks = _submit(cli, "cpus-srun", "--stage", "single-node", "--gpus-per-node", "2", "--launcher", "srun",
                         "--set", "cpus_per_task=3")
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    # one task per GPU, 3 CPUs each (the setting), so OMP_NUM_THREADS is 3 for every rank
    assert {(r["cpus_per_task"], r["omp_num_threads"], r["cpus_per_task_sum"]) for r in ranks} == {("3", "3", 6)}
    step = (out / "step.txt").read_text()
    assert re.search(r"TRES=cpu=6\b", step), step
