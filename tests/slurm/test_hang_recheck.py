"""After a hang that names no node, the supervisor's performance check on the allocation names the
node with the slow link, and recovery drops it (the 4-node testbed: 3 nodes + 1 spare).

node3's link is limited to 100 Mbit/s for the whole job (``tc ... tbf`` in its network namespace,
as tests/slurm/test_perf_spares.py).  The job's tasks stand in for ranks that hang (``--launcher
srun``, one task a node, no torch: a slowed link only slows gloo down, it never hangs it, and a
training loop's start-up would take this test past a minute): in the first attempt each prints a
line and waits, writing nothing more; no progress file and no rank file, so nothing names a node.
The stall is found (the newest log write standing in), the step ended, and recovery runs
``preflight --perf`` (gloo, the small settings of test_perf_spares.py, torch on every node) on
node[1-4] over srun: node3 is slow with every peer, it is dropped, the spare node4 takes its
place, and the second attempt (its step's nodes include node4) ends at once with status 0.  Every
wait is for a state (the job's end in ``status --json``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml

from .conftest import CK, REPO
from .test_network_faults import _tc
from .test_perf_spares import PERF
from .test_recovery import _ended, _text
from .test_spares import _env, _job_id

pytest.importorskip("torch", reason="the performance check needs torch (CPU build)")

# the first attempt hangs; a step that holds node4 (the spare, in the relaunch) ends at once
TASK = ('case "$SLURM_STEP_NODELIST" in *4*) echo "relaunched on $SLURMD_NODENAME"; exit 0 ;; esac; '
        'echo "waiting on $SLURMD_NODENAME"; exec sleep 600')


def _site(tmp_path: Path) -> Path:
    """The testbed site with the in-job preflight on (spares) and the perf check's small settings."""
    data = yaml.safe_load((REPO / "site_configs" / "testbed.yaml").read_text())
    data["name"] = "testbed-hang"
    data["preflight"] = {"before_submit": False, "in_job": True}
    data["perf"] = {**PERF, "iters": 4}
    path = tmp_path / "testbed-hang.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_hang_that_names_no_node_is_put_on_the_slow_link_by_the_performance_check(cli: CK, tmp_path: Path) -> None:
    cli.bed.wait_idle()
    run_dir = cli.runs / "hang"
    began = time.monotonic()
    with _tc(cli.bed, "node3", "tbf", "rate", "100mbit", "burst", "64kb", "latency", "400ms"):
        proc = cli("submit", "--site", str(_site(tmp_path)), "--stage", "multi-node", "--nodes", "3", "--spares", "1",
                   "--gpus-per-node", "1", "--launcher", "srun", "--set", "cpus_per_task=1",
                   "--set", "stall_floor_s=5", "--set", "save_limit_s=5", "--out", str(run_dir), "--",
                   "bash", "-c", TASK, env=_env(cli, tmp_path, set()), timeout=120)
        assert proc.code == 0, proc.err
        job = _job_id(proc.out)
        try:
            st = _ended(cli, job)
        finally:
            cli.bed.run("scancel", job, check=False)
    took = time.monotonic() - began
    batch = _text(run_dir, "slurm-*.out")
    assert st["state"] == "COMPLETED", batch[-6000:]
    print(f"submit to the end: {took:.0f} s",
          *re.findall(r"clusterkit: \d\d:\d\d:\d\d (?:watch|recovery|attempt|launcher).*", batch), sep="\n")
    assert "watch: the run stalled: no write to the rank logs" in batch, batch[-6000:]
    assert "recovery: no node named for the hang: running the performance check on node[1-4]" in batch, batch[-6000:]
    assert "recovery: the performance check after the hang: node3 below par (slow" in batch, batch[-6000:]
    [attempt] = cli.status(job)["attempts"]
    assert "node behind: node3 below par (slow" in attempt["verdict"], attempt
    assert "by the performance check after the hang" in attempt["verdict"], attempt
    assert [d["host"] for d in attempt["dropped"]] == ["node3"] and attempt["then"] == "relaunch", attempt
    second = _text(run_dir, f"{job}.r0.a1.*.out")
    assert set(re.findall(r"relaunched on (node\d)", second)) == {"node1", "node2", "node4"}, second[-3000:]
