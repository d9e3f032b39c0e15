"""A fault the supervisor's watch finds on the Slurm testbed, for real (3 nodes + 1 spare,
torchrun, the DDP loop over gloo of tests/slurm/recovery_train.py reporting its progress with
``clusterkit.progress``, as in tests/slurm/test_stall.py).

- node3's CPU limited to 10 % of one CPU (its cgroup's quota, as tests/slurm/test_network_faults.py
  does) once training is under way, every rank doing the same matrix products per step and
  reporting their time (``work_s``): ``status`` names node3 the straggler.

Every wait is for a state: a progress line, a line of the job's log, the job's end in ``status --json``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from clusterkit import heartbeat

from .conftest import CK
from .test_network_faults import _cpu_quota
from .test_recovery import STEPS, TRAIN, _ended, _text
from .test_spares import _env, _job_id

pytest.importorskip("torch", reason="the training loop needs torch (pip install torch, CPU build)")

def _until(what, timeout: float, about: str):   # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := what():
            return got
        time.sleep(0.2)
    raise AssertionError(f"{about}: not seen in {timeout} s")


def test_a_node_limited_to_a_tenth_of_a_cpu_is_named_the_straggler(cli: CK, tmp_path: Path) -> None:
    cgroup = cli.bed.cgroup("node3")
    if cgroup is None:
        pytest.skip("no cpu cgroup controller here (neither cgroup v2 cpu nor v1 cpu)")
    cli.bed.wait_idle()
    run_dir = cli.runs / "slow"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "3", "--gpus-per-node", "1",
               "--launcher", "torchrun", "--run-name", f"slow-{time.time_ns()}", "--out", str(run_dir), "--",
               "python", str(TRAIN), "--steps", str(STEPS), "--step-s", "0", "--work", "40",
               env=_env(cli, tmp_path, set()), timeout=120)
    assert proc.code == 0, proc.err
    job = _job_id(proc.out)
    try:
        progress = run_dir / "logs" / f"{job}.progress"
        _until(lambda: heartbeat.read(progress) is not None, 180, "training under way")
        with _cpu_quota(cgroup, 10):
            st = _ended(cli, job)
    finally:
        cli.bed.run("scancel", job, check=False)
    assert st["state"] == "COMPLETED", _text(run_dir, "slurm-*.out")[-6000:]
    slow = st["stragglers"]
    assert [s["node"] for s in slow] == ["node3"] and slow[0]["measure"] == "work", st
    assert slow[0]["ratio"] > st["straggler_ratio"], st
    shown = cli("status", job)
    said = r"straggler: node3 \(rank \d+: [0-9.]+ s of work per step, [0-9.]+x the others'"
    assert re.search(said, shown.out), shown.out
    print(f"straggler: {slow[0]}")
