"""The job script's choice of nodes after its in-job preflight: the real ``clusterkit choose-nodes``
reads the report the preflight stand-in prints (a report as ``preflight --json`` writes it), and
every launch step, hostfile and rendezvous head follow the choice."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tests.jobscript.harness import JOB_ID, until

WAITING = "waiting for Slurm to end this run; no result is written"


def _report(tmp_path: Path, **bad: str) -> str:
    """A preflight report: node1..node4 ok but ``bad`` (host -> failing gpu.count message)."""
    nodes = []
    for i in range(1, 5):
        host = f"node{i}"
        if host in bad:
            nodes.append({"host": host, "status": "failed", "reachable": True,
                          "checks": [{"check": "gpu.count", "status": "fail", "severity": "error",
                                      "message": bad[host]}]})
        else:
            nodes.append({"host": host, "status": "ok", "reachable": True, "checks": []})
    path = tmp_path / f"report-{'-'.join(sorted(bad))}.json"
    path.write_text(json.dumps({"version": 1, "nodes": nodes}))
    return str(path)


def test_a_spare_takes_the_bad_nodes_place_in_every_launch_step(job, tmp_path: Path) -> None:
    j = job("--set", "preflight_in_job=true", "--set", "spares=1", "--node-setup", "true", launcher="deepspeed",
            SLURM_JOB_NODELIST="node[1-3]", JS_PREFLIGHT_REPORT=_report(tmp_path, node1="7 GPUs, expected 8"),
            JS_PREFLIGHT_RC="1")
    assert "#SBATCH --nodes=3\n" in (j.run_dir / "job.sbatch").read_text()
    j.start()
    # the hostfile, the node setup step and the launch step follow the chosen nodes, not the allocation
    until("the launch step", lambda: any("deepspeed" in c for c in j.calls("srun")))
    assert (j.run_dir / "hostfile").read_text() == "node2 slots=1\nnode3 slots=1\n"
    srun = j.calls("srun")
    assert srun[:3] == ["--nodes=2", "--nodelist=node2,node3", "--ntasks=2"], srun
    assert "dropped node1 (failed: gpu.count: 7 GPUs, expected 8)" in j.log()
    sel = json.loads((j.run_dir / "logs" / f"nodes-{JOB_ID}.r0.json").read_text())
    assert sel["chosen"] == ["node2", "node3"] and [d["host"] for d in sel["dropped"]] == ["node1"]
    report = json.loads((j.run_dir / "logs" / f"preflight-{JOB_ID}.r0.json").read_text())
    assert [n["host"] for n in report["nodes"]] == ["node1", "node2", "node3", "node4"]
    [pre, choose] = j.calls("clusterkit")
    assert pre.endswith("--transport=srun --nodelist node[1-3] --json")
    assert "choose-nodes" in choose and "--nodes 2 --spares 1 --check base" in choose


def test_more_bad_nodes_than_spares_and_too_few_left_for_a_requeue_end_with_the_list(job, tmp_path: Path) -> None:
    # the testbed site has 4 nodes: without node1 and node3, 2 remain for 2 nodes and 1 spare
    j = job("--set", "preflight_in_job=true", "--set", "spares=1", SLURM_JOB_NODELIST="node[1-3]",
            JS_PREFLIGHT_REPORT=_report(tmp_path, node1="7 GPUs", node3="no GPU"), JS_PREFLIGHT_RC="1").start()
    assert j.wait() == 1, j.log()
    assert j.reason() == ("preflight: 2 nodes failed, 1 spares: node1 (failed: gpu.count: 7 GPUs), "
                          "node3 (failed: gpu.count: no GPU); not requeued: without them 2 of the site's 4 nodes "
                          "remain for 2 and 1 spare(s); resubmit without them: clusterkit submit "
                          f"--exclude-from {JOB_ID} --site testbed --stage multi-node --nodes 2 --gpus-per-node 1 "
                          "--launcher srun --set preflight_in_job=true --set spares=1 -- "
                          f"{Path(__file__).parent / 'rank_standin.sh'}\n")
    assert j.result() == "1\n" and j.rank_pids() == [] and j.calls("srun") == []


def test_perf_verdicts_are_named_as_a_perf_check(job, tmp_path: Path) -> None:
    nodes = [{"host": "node1", "status": "slow", "reason": "gemm 40% below the median",
              "figures": {"gemm_tflops": 0.6}},
             {"host": "node2", "status": "ok", "figures": {"gemm_tflops": 1.0}},
             {"host": "node3", "status": "wrong-result", "reason": "checksum differs"}]
    report = tmp_path / "perf.json"
    report.write_text(json.dumps({"version": 1, "nodes": nodes}))
    j = job("--set", "preflight_in_job=perf", "--set", "spares=1", SLURM_JOB_NODELIST="node[1-3]",
            JS_PREFLIGHT_REPORT=str(report), JS_PREFLIGHT_RC="1").start()
    assert j.wait() == 1, j.log()
    assert (j.reason() or "").startswith("perf check: 2 nodes below par, 1 spares: node1 (slow: gemm 40% below "
                                         "the median), node3 (wrong-result: checksum differs)"), j.reason()
    [pre, _] = j.calls("clusterkit")
    assert pre.endswith("--nodelist node[1-3] --perf --json")


def test_no_spares_requeues_with_the_bad_node_excluded(job, tmp_path: Path) -> None:
    j = job("--set", "preflight_in_job=true", "--exclude", "node4", restarts=0,
            JS_PREFLIGHT_REPORT=_report(tmp_path, node2="7 GPUs"), JS_PREFLIGHT_RC="1").start()
    j.await_log(WAITING)
    calls = j.calls("scontrol")
    assert calls[-3:] == [f"requeuehold {JOB_ID}", f"update JobId={JOB_ID} ExcNodeList=node[2,4]",
                          f"release {JOB_ID}"], calls
    assert "requeued with node[2,4] excluded (restart 1 of 2)" in j.log()
    j.term_shell()                       # Slurm ends the run it requeued
    assert j.wait() == -signal.SIGTERM, j.log()
    until("the wait's sleep to end with the shell", lambda: j.group() == [])
    assert j.result() is None and j.rank_pids() == []


def test_no_spares_and_no_restarts_left_ends_with_the_resubmit_command(job, tmp_path: Path) -> None:
    j = job("--set", "preflight_in_job=true", "--set", "max_restarts=0",
            JS_PREFLIGHT_REPORT=_report(tmp_path, node2="7 GPUs"), JS_PREFLIGHT_RC="1").start()
    assert j.wait() == 1, j.log()
    assert (j.reason() or "").startswith("preflight: 1 nodes failed, 0 spares: node2 (failed: gpu.count: 7 GPUs); "
                                         f"resubmit without them: clusterkit submit --exclude-from {JOB_ID} ")
    assert not any(c.startswith("requeue") for c in j.calls("scontrol"))


def test_a_refused_requeue_ends_the_job_with_the_list(job, tmp_path: Path) -> None:
    j = job("--set", "preflight_in_job=true", JS_PREFLIGHT_REPORT=_report(tmp_path, node1="7 GPUs"),
            JS_PREFLIGHT_RC="1", JS_REQUEUEHOLD_RC="1").start()
    assert j.wait() == 1, j.log()
    assert (j.reason() or "").endswith("; but scontrol requeuehold failed: resubmit with --exclude node1\n")


def test_a_preflight_that_cannot_run_ends_the_job(job) -> None:
    j = job("--set", "preflight_in_job=true", JS_PREFLIGHT_RC="2").start()
    assert j.wait() == 1, j.log()
    assert j.reason() == "preflight could not check the allocated nodes (exit 2); not starting the launcher\n"


def test_a_report_that_is_not_one_ends_the_job(job, tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.json"
    bogus.write_text('{"nodes": [{"host": "node1; rm -rf /", "status": "ok"}]}')
    j = job("--set", "preflight_in_job=true", JS_PREFLIGHT_REPORT=str(bogus)).start()
    assert j.wait() == 1, j.log()
    assert "is not a valid host name" in j.log()
    assert j.reason() == ("clusterkit choose-nodes failed (exit 2; the error above says why); "
                          "not starting the launcher\n")


def test_a_kill_during_the_wait_after_a_requeue_leaves_no_sleep_behind(job, tmp_path: Path) -> None:
    """Slurm's KILL to the batch shell alone (a node whose Slurm tracks processes by parentage):
    the wait sleeps a second at a time, so nothing of it outlives the shell for long (before: a
    `sleep 600` stayed on the node)."""
    import os

    j = job("--set", "preflight_in_job=true", restarts=0, JS_PREFLIGHT_REPORT=_report(tmp_path, node2="7 GPUs"),
            JS_PREFLIGHT_RC="1").start()
    try:
        j.await_log(WAITING)
        os.kill(j.pid, signal.SIGKILL)
        assert j.wait() == -signal.SIGKILL
        # a second's sleep ends; the 600 s one of before would not within this bound
        until("the wait's last sleep to end", lambda: j.group() == [], timeout=60)
    finally:
        j.kill()
    assert j.result() is None


def test_slurms_term_during_the_requeue_leaves_every_scontrol_call_its_answer(job, tmp_path: Path) -> None:
    """Slurm answers requeuehold with TERM to every process of the job at once: the supervisor's
    start still sets the exclusion and releases the job, then waits for Slurm's next TERM."""
    j = job("--set", "preflight_in_job=true", restarts=0, JS_PREFLIGHT_REPORT=_report(tmp_path, node2="7 GPUs"),
            JS_PREFLIGHT_RC="1", JS_REQUEUEHOLD_TERM="1").start()
    j.await_log(WAITING)
    assert j.calls("scontrol")[-3:] == [f"requeuehold {JOB_ID}", f"update JobId={JOB_ID} ExcNodeList=node2",
                                        f"release {JOB_ID}"], j.log()
    j.usr2()                             # a late time-limit warning: noted, the wait goes on
    j.await_log("SIGUSR2 while waiting for Slurm to end this run: ignored")
    assert j.alive()
    j.slurm_term()
    assert j.wait() == -signal.SIGTERM, j.log()
    until("the job's processes to end", lambda: j.group() == [])
    assert j.result() is None and j.calls("srun") == []


def test_a_cancel_during_the_preflight_ends_the_job_by_term_with_no_result(job) -> None:
    j = job("--set", "preflight_in_job=true", "--node-setup", "true", JS_PREFLIGHT_HOLD="1").start()
    until("the preflight to run", lambda: (j.work / "preflight.running").exists())
    j.slurm_term()
    assert j.wait() == -signal.SIGTERM, j.log()
    until("the job's processes to end", lambda: j.group() == [])
    assert j.result() is None and j.calls("srun") == [] and "choose-nodes" not in " ".join(j.calls("clusterkit"))
