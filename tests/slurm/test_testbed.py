"""The testbed itself: four idle nodes with gpu:8, distinct hostnames, GPUs handed to jobs."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from .conftest import Testbed, _supervise_offsets, daemon_deaths


def _wait_done(bed: Testbed, job_id: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = bed.run("squeue", "-h", "--states=all", "-j", job_id, "-o", "%T").stdout.strip()
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} still {state} after {timeout}s")


def test_four_idle_nodes_with_eight_fake_gpus(testbed: Testbed) -> None:
    testbed.wait_idle()
    out = testbed.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N %T %G").stdout.split("\n")
    rows = sorted(line.split() for line in out if line.strip())
    assert rows == [[f"node{i}", "idle", "gpu:8"] for i in range(1, 5)]


def test_job_sees_distinct_hostnames_and_its_gpus(testbed: Testbed, tmp_path) -> None:
    testbed.wait_idle()
    tmp_path.chmod(0o755)
    script = tmp_path / "probe.sh"
    script.write_text("#!/bin/bash\nsrun bash -c 'echo $(hostname) $CUDA_VISIBLE_DEVICES'\n")
    job = testbed.run(
        "sbatch", "--parsable", "-N4", "--ntasks-per-node=1", "--gpus-per-node=8",
        f"--output={tmp_path}/out-%j.txt", f"--chdir={tmp_path}", str(script),
    ).stdout.strip()
    assert _wait_done(testbed, job) == "COMPLETED"
    lines = sorted((tmp_path / f"out-{job}.txt").read_text().split("\n"))
    assert [line for line in lines if line] == [f"node{i} 0,1,2,3,4,5,6,7" for i in range(1, 5)]


def test_sbatch_refuses_impossible_requests(testbed: Testbed, tmp_path) -> None:
    script = tmp_path / "noop.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    too_many_nodes = testbed.run("sbatch", "-N5", str(script), check=False)
    too_many_gpus = testbed.run("sbatch", "--gpus-per-node=9", str(script), check=False)
    assert too_many_nodes.returncode == 1 and "Node count specification invalid" in too_many_nodes.stderr
    assert too_many_gpus.returncode == 1 and "Requested node configuration is not available" in too_many_gpus.stderr


def test_a_slurmd_that_dies_is_restarted_logged_and_named(testbed: Testbed, tmp_path) -> None:
    """A slurmd that aborts (as the 22.05 one once did, on a double free in libmunge) is started
    again by the testbed's supervisor, logged, and named by the report of a test failing then."""
    testbed.wait_idle()
    before = _supervise_offsets()
    pid_file = testbed.lab / "run" / "slurmd-node2.pid"
    pid = int(pid_file.read_text().strip())
    os.kill(pid, signal.SIGABRT)
    deadline = time.monotonic() + 30
    deaths: list[str] = []
    while time.monotonic() < deadline and not deaths:
        time.sleep(0.3)
        deaths = daemon_deaths(before)
    assert len(deaths) == 1 and f"slurmd on node2 (pid {pid}) died" in deaths[0], deaths
    new_pid = int(deaths[0].rsplit("restarted as pid ", 1)[1])
    assert new_pid != pid and Path(f"/proc/{new_pid}").exists()
    testbed.wait_idle()
    # the restarted slurmd runs jobs again: one step on every node, node2 included
    tmp_path.chmod(0o755)
    job = testbed.run("sbatch", "--parsable", "-N4", "--ntasks-per-node=1", f"--output={tmp_path}/o-%j",
                      "--wrap", "srun hostname").stdout.strip()
    assert _wait_done(testbed, job) == "COMPLETED"
    assert sorted((tmp_path / f"o-{job}").read_text().split()) == [f"node{i}" for i in range(1, 5)]
