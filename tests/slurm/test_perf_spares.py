"""The job chooses its nodes from its own performance check, on a 5-node testbed with real faults.

``submit --nodes 4 --spares 1 --set preflight_in_job=perf``: the job allocates five nodes, runs
``preflight --perf`` inside its allocation (one srun step: torch.distributed with gloo over the
testbed's veth links), drops the nodes below par and launches a real torchrun rendezvous and gloo
all-reduce (examples/allreduce.py) on the nodes it chose.  The faults are real: node3's link
limited with ``tc ... tbf`` in its network namespace, node2's CPU limited through its cgroup,
node4's link set down under a running training job.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from clusterkit.diagnose.catalogue import is_store_timeout

from .conftest import CK, REPO, Testbed
from .test_network_faults import _tc
from .test_perf_preflight import _cpu_quota_from_rendezvous
from .test_spares import RANK_LINE, _job_id, _logs

pytest.importorskip("torch", reason="the perf check and examples/allreduce.py need torch (CPU build)")

# the perf settings of tests/slurm/test_perf_preflight.py: the check takes seconds, not a minute
PERF = {"backend": "gloo", "gemm_n": 512, "gemm_iters": 4, "inter_message_mb": 4, "warmup": 1, "iters": 6,
        "slow_ratio": 0.5, "timeout_s": 240}
TRAIN = "tests/slurm/doctor_train.py"
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")
# node4's link stays down until what doctor reads is there: node4's torchrun agent has given up
# waiting on its rendezvous store (c10d's "waitForInput ... timed out" line, one read timeout
# after the cut: torch's default, 60 s; the testbed keeps it: at 15 s a loaded machine once failed a
# rendezvous whose head started late) and a rank on another node has timed out in its all-reduce (the
# loop's collective timeout, 20 s), so the job fails rather than resumes once the link is back.
# The bound is for a line that comes about 60 s after the cut (65 s at most: the agent asks the
# store once a second): 120 s once passed by before it came on a loaded CI machine, so 200 s, and
# a failure shows where node4's agent was (its Python stack).  Within Slurm's SlurmdTimeout (300 s):
# Slurm keeps node4 up, and what the job's logs say is the launchers' and the ranks' own account.
# The job cannot end while the link is down (srun cannot reach node4's task), so nothing else is
# waited for before the link comes up.
LINK_DOWN_MAX_S = 200
GLOO_TIMEOUT = re.compile(r"Timed out waiting \d+ms for (?:recv|send) operation")


@pytest.fixture
def cli(ck, testbed5: Testbed, tmp_path: Path) -> CK:  # type: ignore[no-untyped-def]
    tmp_path.chmod(0o755)
    return CK(bed=testbed5, state_dir=tmp_path / "state", runs=tmp_path / "runs", ck=ck)


def _site(tmp_path: Path, **perf: float) -> Path:
    """The testbed site on five nodes, with a perf: section (``perf``: more keys) and the in-job preflight on."""
    data = yaml.safe_load((REPO / "site_configs" / "testbed.yaml").read_text())
    data["name"] = "testbed-perf"
    data["nodes"]["nodelist"] = "node[1-5]"
    data["preflight"] = {"before_submit": False, "in_job": True}
    data["perf"] = {**PERF, **perf}
    path = tmp_path / "testbed-perf.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _submit_args(site: Path, run_dir: Path, *args: str) -> list[str]:
    return ["--site", str(site), "--stage", "multi-node", "--gpus-per-node", "1", "--launcher", "torchrun",
            "--nodes", "4", "--spares", "1", "--set", "preflight_in_job=perf", *args, "--out", str(run_dir), "--wait",
            "--", "python", "examples/allreduce.py"]


def _submit(cli: CK, site: Path, run_dir: Path, *args: str):  # type: ignore[no-untyped-def]
    return cli("submit", *_submit_args(site, run_dir, *args), timeout=400)


def _wait_for(pred: Callable[[], bool], what: str, run_dir: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"{what}: not in {timeout}s; logs: {_logs(run_dir)[-3000:]}"
        time.sleep(0.5)


def ckpt_step(path: Path) -> int:
    import torch

    return int(torch.load(path)["step"])


def _selection(run_dir: Path, job: str) -> dict:
    return json.loads((run_dir / "logs" / f"nodes-{job}.r0.json").read_text())


def test_the_spare_replaces_the_node_with_a_slow_link(cli: CK, tmp_path: Path) -> None:
    cli.bed.wait_idle()
    site, run_dir = _site(tmp_path), cli.runs / "slow-link"
    with _tc(cli.bed, "node3", "tbf", "rate", "100mbit", "burst", "64kb", "latency", "400ms"):
        proc = _submit(cli, site, run_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr + _logs(run_dir)
    job = _job_id(proc.stdout)
    assert "#SBATCH --nodes=5\n" in (run_dir / "job.sbatch").read_text()
    report = json.loads((run_dir / "logs" / f"preflight-{job}.r0.json").read_text())
    assert {n["host"]: n["status"] for n in report["nodes"]} == {
        "node1": "ok", "node2": "ok", "node3": "slow", "node4": "ok", "node5": "ok"}, report
    sel = _selection(run_dir, job)
    good = ["node1", "node2", "node4", "node5"]
    assert sel["outcome"] == "launch" and sel["check"] == "perf" and sel["chosen"] == good, sel
    [dropped] = sel["dropped"]
    assert dropped["host"] == "node3" and dropped["verdict"] == "slow", dropped
    assert "all-reduce with every peer low" in dropped["reason"], dropped
    # the all-reduce ran on the four chosen nodes, one rank each
    logs = _logs(run_dir)
    ranks = RANK_LINE.findall(logs)
    assert sorted(int(r[0]) for r in ranks) == [0, 1, 2, 3] and {r[1] for r in ranks} == {"4"}, logs
    assert {r[2] for r in ranks} == set(good), ranks
    assert "allreduce OK: world_size=4" in logs
    # the record names node3 as dropped with the figures the check measured
    status = cli.status(job)
    [rec] = status["dropped"]
    figures = rec["figures"]
    assert rec["host"] == "node3" and rec["verdict"] == "slow", rec
    assert figures["busbw_inter_gbps"] > 0 and figures["gemm_tflops"] > 0, rec
    node3 = next(n for n in report["nodes"] if n["host"] == "node3")
    assert figures["busbw_inter_gbps"] == min(p["gbps"] for p in node3["busbw_inter_gbps"])
    text = cli("status", job, timeout=60)
    assert re.search(r"dropped: node3 \(slow: .*all-reduce with every peer low.*busbw_inter_gbps", text.out), text.out
    doctor = cli("doctor", job, timeout=120)
    assert re.search(r"  dropped before launch: node3 \(slow: .*busbw_inter_gbps", doctor.out), doctor.out
    # and the next job keeps node3 out
    again = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "4", "--gpus-per-node", "1",
                "--launcher", "torchrun", "--exclude-from", job, "--out", str(cli.runs / "again"), "--dry-run",
                "--", "python", "examples/allreduce.py")
    assert again.code == 0, again.err
    assert "#SBATCH --exclude=node3\n" in (cli.runs / "again" / "job.sbatch").read_text()


def test_two_nodes_below_par_with_one_spare_ends_before_training(cli: CK, tmp_path: Path) -> None:
    cgroup = cli.bed.cgroup("node2")
    if cgroup is None:
        pytest.skip("no cpu cgroup controller here (neither cgroup v2 cpu nor v1 cpu)")
    cli.bed.wait_idle()
    # Two bad nodes of five take part in five of the six pairs: the pairs' median is no baseline
    # then (node3's 0.1 Gbit/s pairs may sit above half of it), so the site states its expectation
    # of a pair, as a site with few nodes must; the healthy pairs measure about 4 Gbit/s here.
    site, run_dir = _site(tmp_path, busbw_inter_gbps_min=0.5), cli.runs / "two-bad"
    # node2's quota from its perf worker's rendezvous on: the measurement under it, not torch's import
    with _tc(cli.bed, "node3", "tbf", "rate", "100mbit", "burst", "64kb", "latency", "400ms"):
        popen = cli.popen("submit", *_submit_args(site, run_dir))
        try:
            with _cpu_quota_from_rendezvous(cli.bed, "node2", 5, popen):
                out, err = popen.communicate(timeout=400)
        finally:
            if popen.poll() is None:
                popen.kill()
                popen.communicate()
    proc = subprocess.CompletedProcess(popen.args, popen.returncode, out, err)
    assert proc.returncode == 1, proc.stdout + proc.stderr + _logs(run_dir)
    job = _job_id(proc.stdout)
    reason = (run_dir / f"{job}.reason").read_text()
    assert reason.startswith("perf check: 2 nodes below par, 1 spares: node2 (slow: "), reason
    assert "node3 (slow: " in reason and "resubmit without them: clusterkit submit --exclude-from" in reason, reason
    sel = _selection(run_dir, job)
    assert sel["outcome"] == "end" and sel["chosen"] == [] and [d["host"] for d in sel["dropped"]] == ["node2", "node3"]
    logs = _logs(run_dir)
    assert not RANK_LINE.search(logs) and "allreduce rank" not in logs, logs
    assert not list((run_dir / "logs").glob(f"{job}.r0.*.out")), "a launch step wrote its log: the launcher ran"
    status = cli("status", job, timeout=60).out
    assert "reason: perf check: 2 nodes below par, 1 spares: node2 (slow: " in status, status
    doctor = cli("doctor", job, timeout=120)
    assert doctor.code == 1, doctor.out + doctor.err
    assert doctor.out.startswith("bad-nodes: perf check: 2 nodes below par, 1 spares: node2 (slow: "), doctor.out
    for node in ("node2", "node3"):
        assert f"  dropped before launch: {node} (slow: " in doctor.out, doctor.out


def _cut_seen(run_dir: Path, job: str) -> bool:
    """node4's agent has timed out on the rendezvous store, and a rank on another node in its all-reduce."""
    def text(node: str) -> str:
        path = run_dir / "logs" / f"{job}.r0.{node}.out"
        return path.read_text(errors="replace") if path.exists() else ""
    return is_store_timeout(text("node4")) and any(GLOO_TIMEOUT.search(text(f"node{i}")) for i in (1, 2, 3))


def _launcher_stacks(netns: str) -> str:
    """The Python stacks of the torchrun processes in a node's network namespace (py-spy), for a failure's message."""
    pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, timeout=10).stdout.split()
    out = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "torchrun" in cmd:
            dump = subprocess.run(["py-spy", "dump", "--pid", pid], capture_output=True, text=True, timeout=30)
            out.append(f"pid {pid}: {cmd[:200]}\n{dump.stdout[-3000:]}{dump.stderr[-500:]}")
    return "\n".join(out) or f"no torchrun process in {netns}"


@pytest.mark.skip(reason="open defect: node4's store line, which doctor names the node by, did not come in 200 s "
                  "in 2 of 4 CI runs: torch's keep-alive write has no read timeout (the cause: docs/admin.md, "
                  "the rendezvous store's read timeout)")
def test_link_cut_mid_run_is_a_network_verdict_naming_the_node(cli: CK, tmp_path: Path) -> None:
    """node4's link set down under a running DDP loop (a gradient all-reduce every step), for
    longer than the collectives' timeout, then up again: every rank's all-reduce times out (a
    cascade, which names no node), and node4's torchrun agent has lost its rendezvous store
    (RendezvousConnectionError); doctor names node4 from the job's logs."""
    cli.bed.wait_idle()
    site, run_dir = _site(tmp_path), cli.runs / "cut"
    proc = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "4", "--gpus-per-node", "1",
               "--launcher", "torchrun", "--set", "preflight_in_job=false", "--set", "max_restarts=0",
               "--exclude", "node5", "--out", str(run_dir), "--", "python", TRAIN, "--steps", "100000",
               "--step-s", "0.2", "--pg-timeout-s", "20", "--trap-term", "--ckpt", str(tmp_path / "cut.pt"),
               timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _job_id(proc.stdout)
    ip = ["ip", "-n", cli.bed.netns("node4"), "link", "set", cli.bed.iface("node4")]
    try:
        _wait_for(lambda: all(f" on node{i} step 3 " in _logs(run_dir) for i in range(1, 5)),
                  "every rank trains", run_dir)
        subprocess.run([*ip, "down"], check=True, capture_output=True, timeout=10)
        try:
            try:
                _wait_for(lambda: _cut_seen(run_dir, job), "node4's store timeout and another node's collective "
                          "timeout", run_dir, timeout=LINK_DOWN_MAX_S)
            except AssertionError as e:
                stacks = _launcher_stacks(cli.bed.netns("node4"))
                raise AssertionError(f"{e}\nnode4's launcher now:\n{stacks}") from None
        finally:
            subprocess.run([*ip, "up"], check=True, capture_output=True, timeout=10)
        st = cli.wait_for(job, lambda s: s["state"] in TERMINAL, timeout=240, what="the end")
    finally:
        subprocess.run([*ip, "up"], capture_output=True, timeout=10)
        cli.bed.run("scancel", job, check=False)
    assert st["state"] == "FAILED", (st, _logs(run_dir)[-4000:])
    doctor = cli("doctor", job, "--json", timeout=120)
    rep = json.loads(doctor.out)
    v = rep["verdict"]
    assert doctor.code == 1 and v["category"] in ("nccl-network", "rendezvous"), json.dumps(rep, indent=1)[:4000]
    assert v["node"] == "node4", json.dumps(rep, indent=1)[:4000]
    assert ckpt_step(tmp_path / "cut.pt") >= 4   # rank 0 saved its checkpoints while it trained
