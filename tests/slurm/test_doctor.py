"""``clusterkit doctor JOB`` on jobs that fail for real on the Slurm testbed.

Every job is a real torch DDP loop (tests/slurm/doctor_train.py) under the real launchers,
killed by the real cause: an exception in one rank, slurmstepd's memory enforcement (--mem),
a rendezvous endpoint nobody serves, a port already held, a module missing on one node, the
time limit, scancel, a node set down mid-job, a requeue.  The jobs are submitted together at
the start of the module (the testbed runs them side by side on node1-node2; the node-failure
job gets node3-node4 to itself) so that the minute-long time limit overlaps everything else.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator

import pytest

from .conftest import CK, REPO, Testbed

pytest.importorskip("torch", reason="the doctor jobs train with torch (CPU build)")

TRAIN = "tests/slurm/doctor_train.py"
PAIR = ("--exclude", "node3,node4")            # the side-by-side jobs
FAR = ("--exclude", "node1,node2")             # the node-failure job: node4 goes down under it
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Jobs:
    """The module's jobs by scenario name, and the port the port-in-use job finds held."""

    def __init__(self, cli: CK, held: socket.socket) -> None:
        self.cli, self.held, self.ids = cli, held, {}
        self.nobody = _free_port()  # the rendezvous endpoint no one serves

    def submit(self, name: str, *args: str) -> None:
        proc = self.cli("submit", "--out", str(self.cli.runs / name), "--set", "cpus_per_task=1", *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        self.ids[name] = re.search(r"Submitted job (\d+)", proc.stdout).group(1)

    def log_text(self, name: str) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted((self.cli.runs / name / "logs").glob("*.out")))

    def wait_for_line(self, name: str, needle: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.log_text(name):
            assert time.monotonic() < deadline, f"{name}: {needle!r} not in its logs after {timeout}s"
            time.sleep(0.5)

    def end(self, name: str, timeout: float = 300) -> dict:
        return self.cli.wait_for(self.ids[name], lambda s: s["state"] in TERMINAL, timeout=timeout, what="the end")

    def doctor(self, name: str) -> tuple[int, dict]:
        proc = self.cli("doctor", self.ids[name], "--json", timeout=120)
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def jobs(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobs]:
    base = tmp_path_factory.mktemp("doctor")
    base.chmod(0o755)
    cli = CK(bed=testbed, state_dir=base / "state", runs=base / "runs")
    mem_site = base / "testbed-mem.yaml"
    mem_site.write_text(f"name: testbed-mem\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\n"
                        "scheduler: {sbatch: {mem: 1500M}}\n")
    node_site = base / "node-site"  # a per-node "site-packages": the module is on node1 only
    for node in ("node1", "node2"):
        (node_site / node).mkdir(parents=True)
    (node_site / "node1" / "ckdoc_extra.py").write_text("VALUE = 1\n")
    # the port-in-use job runs on node1 or node2, each a host of its own: the port is held on both
    held = testbed.listen_on("node1")
    held_too = testbed.listen_on("node2", held.getsockname()[1])
    j = Jobs(cli, held)
    multi = ("--site", "testbed", "--stage", "multi-node", "--nodes", "2")
    single = ("--site", "testbed", "--gpus-per-node", "1")
    rdzv = ("torchrun", "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d")
    j.submit("user-code", *multi, "--gpus-per-node", "3", *PAIR, "--", "python", TRAIN, "--raise-rank", "5")
    j.submit("host-oom", "--site", str(mem_site), "--gpus-per-node", "2", *PAIR, "--", "python", TRAIN,
             "--hog-rank", "1")
    j.submit("rendezvous", *multi, "--gpus-per-node", "1", "--launcher", "srun", *PAIR, "--", *rdzv,
             "--rdzv-endpoint", f"127.0.0.1:{j.nobody}", "--rdzv-conf", "is_host=false,read_timeout=10", TRAIN)
    j.submit("port-in-use", *single, "--launcher", "srun", *PAIR, "--", "torchrun", "--nnodes", "1",
             "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
             f"127.0.0.1:{held.getsockname()[1]}", "--rdzv-conf", "is_host=true", TRAIN)
    j.submit("import-env", *multi, "--gpus-per-node", "1", *PAIR, "--", "python", TRAIN,
             "--needs-module", "ckdoc_extra", "--node-site", str(node_site))
    j.submit("time-limit", *single, "--set", "time=00:01:00", "--set", "max_restarts=0", *PAIR, "--", "python", TRAIN,
             "--steps", "100000", "--step-s", "1")
    j.submit("cancel", *single, *PAIR, "--", "python", TRAIN, "--steps", "100000", "--step-s", "1")
    # trains until the test requeues it (its test comes after others that wait minutes), then 3 steps
    j.submit("requeue", *multi, "--gpus-per-node", "1", *PAIR, "--", "python", TRAIN, "--steps", "100000",
             "--resumed-steps", "3", "--step-s", "1", "--ckpt", str(base / "requeue.pt"))
    j.submit("clean", *multi, "--gpus-per-node", "2", *PAIR, "--", "python", TRAIN)
    j.submit("node-down", *multi, "--gpus-per-node", "1", "--set", "max_restarts=0", *FAR, "--",
             "python", TRAIN, "--steps", "100000", "--step-s", "1")
    try:
        yield j
    finally:
        held.close()
        held_too.close()
        testbed.run("scancel", *j.ids.values(), check=False)
        testbed.run("scontrol", "update", "nodename=node4", "state=resume", check=False)
        testbed.wait_idle(timeout=120)


def _assert_verdict(code: int, rep: dict, category: str, **where: object) -> dict:
    v = rep["verdict"]
    assert (code, v["category"]) == (0 if category == "ok" else 1, category), json.dumps(rep, indent=1)[:3000]
    for key, value in where.items():
        assert v[key] == value, (key, v)
    assert v["advice"] or category == "ok"
    return v


def test_rank_that_raises_is_the_cause_not_the_ranks_that_waited(jobs: Jobs) -> None:
    st = jobs.end("user-code")
    assert st["state"] == "FAILED"
    raised = [p for p in (jobs.cli.runs / "user-code" / "logs").glob("*.r0.node*.out")
              if "[rank5]: ValueError: loss is nan at step 2" in p.read_text()]
    assert len(raised) == 1, "rank 5's traceback is in exactly one node's log"
    node = raised[0].name.split(".")[2]
    code, rep = jobs.doctor("user-code")
    v = _assert_verdict(code, rep, "user-code", rank=5, node=node)
    assert "ValueError: loss is nan at step 2" in v["summary"]
    assert any(c["category"] == "connection-reset" and 5 not in c["ranks"] for c in rep["cascade"]), rep["cascade"]
    assert rep["slurm"]["state"] == "FAILED"
    # status shows the cached one-line verdict (without reading any log itself)
    status = jobs.cli("status", jobs.ids["user-code"])
    assert f"  doctor: user-code (node {node}, rank 5): the training code raised an exception" in status.stdout
    assert jobs.cli.status(jobs.ids["user-code"])["diagnosis"].startswith("user-code (node")


def test_memory_past_mem_is_host_oom(jobs: Jobs) -> None:
    jobs.end("host-oom")
    code, rep = jobs.doctor("host-oom")
    v = _assert_verdict(code, rep, "host-oom", node="node1" if "node1" in jobs.log_text("host-oom") else "node2")
    assert "exceeded memory limit" in " ".join(v["evidence"]) or "Exceeded job memory limit" in " ".join(v["evidence"])


def test_endpoint_nobody_serves_is_rendezvous(jobs: Jobs) -> None:
    jobs.end("rendezvous")
    code, rep = jobs.doctor("rendezvous")
    v = _assert_verdict(code, rep, "rendezvous")
    assert f"(127.0.0.1, {jobs.nobody})" in v["evidence"][0] or f"127.0.0.1:{jobs.nobody}" in v["evidence"][0], v


def test_port_already_held_is_port_in_use(jobs: Jobs) -> None:
    jobs.end("port-in-use")
    code, rep = jobs.doctor("port-in-use")
    v = _assert_verdict(code, rep, "port-in-use", rank=0)
    assert f"port: {jobs.held.getsockname()[1]}" in v["evidence"][0] and "EADDRINUSE" in v["evidence"][0]
    assert v["node"] in ("node1", "node2")


def test_module_missing_on_one_node_is_import_env(jobs: Jobs) -> None:
    jobs.end("import-env")
    code, rep = jobs.doctor("import-env")
    v = _assert_verdict(code, rep, "import-env", node="node2")
    assert "No module named 'ckdoc_extra'" in v["evidence"][0]


def test_time_limit(jobs: Jobs) -> None:
    st = jobs.end("time-limit", timeout=400)
    assert st["state"] == "TIMEOUT"
    code, rep = jobs.doctor("time-limit")
    v = _assert_verdict(code, rep, "slurm-time-limit")
    assert any("DUE TO TIME LIMIT" in e for e in v["evidence"])


def test_cancel(jobs: Jobs) -> None:
    jobs.wait_for_line("cancel", "step 0 loss")
    assert jobs.cli("cancel", jobs.ids["cancel"]).returncode == 0
    assert jobs.end("cancel")["state"] == "CANCELLED"
    code, rep = jobs.doctor("cancel")
    _assert_verdict(code, rep, "slurm-cancelled")


def test_requeued_job_is_diagnosed_per_restart(jobs: Jobs) -> None:
    job = jobs.ids["requeue"]
    jobs.wait_for_line("requeue", "step 1 loss")
    jobs.cli.bed.run("scontrol", "requeue", job)
    jobs.cli.wait_for(job, lambda s: s["state"] == "PENDING" and s["restarts"] == 1, what="requeue")
    time.sleep(1.2)  # not in the second of the requeue: slurmd revokes the old credential by the second
    jobs.cli.bed.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    assert jobs.end("requeue")["state"] == "COMPLETED"
    assert "resumed at step" in jobs.log_text("requeue")
    code, rep = jobs.doctor("requeue")
    _assert_verdict(code, rep, "ok")
    assert [r["restart"] for r in rep["restarts"]] == [1, 0]
    older = rep["restarts"][1]["verdict"]
    # restart 0 ended because of the requeue: never "ok", and never a made-up cause
    batch = (jobs.cli.runs / "requeue" / "logs" / f"slurm-{job}.out").read_text()
    assert (older["category"], "requeued" in older["summary"]) in {("slurm-cancelled", True), ("unknown", True)}, (
        older, batch)


def test_clean_run_is_ok(jobs: Jobs) -> None:
    assert jobs.end("clean")["state"] == "COMPLETED"
    code, rep = jobs.doctor("clean")
    _assert_verdict(code, rep, "ok")
    assert [r["restart"] for r in rep["restarts"]] == [0]


def test_node_set_down_mid_job_is_node_failure(jobs: Jobs) -> None:
    jobs.wait_for_line("node-down", "step 0 loss")
    jobs.cli.bed.run("scontrol", "update", "nodename=node4", "state=down", "reason=doctor-test")
    try:   # --no-kill: the allocation survives; no spare, no restart left: the supervisor ends it, naming node4
        assert jobs.end("node-down")["state"] == "FAILED"
        assert "dropped node4 (" in jobs.log_text("node-down"), jobs.log_text("node-down")[-3000:]
    finally:
        jobs.cli.bed.run("scontrol", "update", "nodename=node4", "state=resume", check=False)
    code, rep = jobs.doctor("node-down")
    # under --no-kill Slurm records no NODE_FAIL (the allocation survives; the supervisor ends the
    # job FAILED), so the verdict rests on srun's own line, and names no node
    v = _assert_verdict(code, rep, "slurm-node-failure")
    assert any("srun: error: Node failure on node4" in e for e in v["evidence"]), v


def test_slurm_unreachable_still_diagnoses_the_logs_and_exits_3(jobs: Jobs) -> None:
    assert jobs.end("clean")["state"] == "COMPLETED"
    jobs.cli.bed.stop_controller()
    try:
        proc = jobs.cli("doctor", jobs.ids["clean"], "--json", timeout=180)
    finally:
        jobs.cli.bed.start_controller()
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("clusterkit: error: cannot reach Slurm controller"), lines
    assert lines[0].endswith("(diagnosed from the logs alone)")
    rep = json.loads(proc.stdout)  # the logs' own account is still printed
    assert rep["verdict"]["category"] == "ok" and rep["slurm"] is None
