"""SrunRunner on the Slurm test cluster: one task per node, outputs told apart per node."""

from __future__ import annotations

import pytest

from clusterkit.nodes.transport import ErrorKind, NodeOutput, SrunRunner

from .conftest import Testbed

pytestmark = pytest.mark.slurm


def runner(bed: Testbed, **kw: float) -> SrunRunner:
    return SrunRunner(env=bed.env(login=True), **kw)


def test_one_task_per_node_with_separate_output_and_status(testbed: Testbed) -> None:
    nodes = testbed.nodes[:3]
    seen: list[NodeOutput] = []
    script = ('echo "I am $SLURMD_NODENAME"; echo "err $SLURMD_NODENAME" >&2; '
              'printf "no newline"; [ "$SLURMD_NODENAME" = node2 ] && exit 5; exit 0')
    res = runner(testbed).run_many(nodes, script, timeout_s=20, on_result=seen.append)
    assert list(res) == nodes and not res.interrupted
    assert sorted(r.host for r in seen) == nodes
    for node in nodes:
        r = res[node]
        assert r.error is None, r
        assert r.stdout == f"I am {node}\nno newline"
        assert r.stderr == f"err {node}\n"
        assert r.exit_status == (5 if node == "node2" else 0)


def test_a_hung_node_times_out_alone(testbed: Testbed) -> None:
    nodes = testbed.nodes[:2]
    script = 'echo up; [ "$SLURMD_NODENAME" = node1 ] && sleep 60; echo end'
    res = runner(testbed).run_many(nodes, script, timeout_s=2)
    assert res["node2"].ok and res["node2"].stdout == "up\nend\n"
    assert res["node1"].error is ErrorKind.COMMAND_TIMEOUT and res["node1"].stdout == "up\n"
    assert res["node1"].reachable and not res["node1"].ok


def test_a_node_outside_the_cluster_is_a_launch_error(testbed: Testbed) -> None:
    res = runner(testbed, launch_timeout_s=20).run_many(["node1", "nosuchnode9"], "true",
                                                        timeout_s=5)
    for host in ("node1", "nosuchnode9"):
        assert res[host].error is ErrorKind.LAUNCH, res[host]
        assert res[host].reason  # srun's own message, e.g. invalid node name


def test_inside_an_allocation_like_a_job_script_step(testbed: Testbed) -> None:
    # salloc runs the driver on this machine with SLURM_JOB_ID set, as a job script would:
    # the srun step then runs inside that allocation (--overlap, no new job).
    import json
    import subprocess
    import sys
    from pathlib import Path

    driver = Path(__file__).resolve().parents[1] / "sshlab" / "drive_runner.py"
    req = {"runner": "srun", "hosts": ["node3", "node4"], "timeout_s": 20,
           "script": 'echo "job=$SLURM_JOB_ID on $SLURMD_NODENAME"'}
    proc = subprocess.run(["salloc", "--nodes", "2", "--nodelist", "node[3-4]", "--quiet",
                           sys.executable, str(driver), json.dumps(req)],
                          env=testbed.env(login=True), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)["results"]
    job_ids = set()
    for node in ("node3", "node4"):
        assert results[node]["ok"], results[node]
        words = results[node]["stdout"].split()
        assert words[-1] == node
        job_ids.add(words[0])
    assert len(job_ids) == 1  # both tasks ran in the one allocation
