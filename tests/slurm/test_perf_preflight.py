"""``clusterkit preflight --perf`` on a 5-node testbed, with real faults: node3's link limited
with ``tc ... tbf`` in its network namespace, node3's traffic to node4 only limited (an htb
class and a u32 filter), node2's CPU limited through its cgroup.  The
measurement is the real one: torch.distributed with gloo, one task per node, over the
testbed's veth links."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ..conftest import CLI
from .conftest import Testbed
from .test_network_faults import _cpu_quota, _tc

SITE = """\
name: perf-lab
scheduler: {kind: slurm, partition: debug}
nodes: {nodelist: "node[1-5]", gpus_per_node: 8, gpu_model: H100}
perf:
  backend: gloo
  gemm_n: 512
  gemm_iters: 4
  inter_message_mb: 4
  warmup: 1
  iters: 6
  # this machine's 2 cores run all five nodes and other work: figures vary by 30% run to run
  slow_ratio: 0.5
  timeout_s: 240
"""


def _site(tmp_path: Path) -> Path:
    path = tmp_path / "perf-lab.yaml"
    path.write_text(SITE)
    return path


def _perf(ck: CLI, bed: Testbed, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    proc = ck.proc("preflight", "--site", str(_site(tmp_path)), "--transport", "srun", "--nodelist", "node[1-5]",
                   "--perf", "--json", *extra, env=bed.env(login=True), timeout=300)
    assert proc.out.strip(), proc.err
    return proc.code, json.loads(proc.out), proc.err


def _status(report: dict[str, Any]) -> dict[str, str]:
    return {n["host"]: n["status"] for n in report["nodes"]}


def _why(report: dict[str, Any]) -> str:
    """Each node's verdict and figures, and the medians: what a failed assertion shows."""
    lines = [f"{n['host']}: {n['status']}: {n['reason']} (matmul {n['gemm_tflops']}, pairs "
             + ", ".join(f"{p['peer']} {p['gbps']}" for p in n["busbw_inter_gbps"]) + ")" for n in report["nodes"]]
    return "\n".join([*lines, f"medians {report['perf']['medians']}, slow links {report['slow_links']}"])


def test_healthy_allocation_is_all_ok(ck: CLI, testbed5: Testbed, tmp_path: Path) -> None:
    testbed5.wait_idle()
    code, report, err = _perf(ck, testbed5, tmp_path)
    assert code == 0, json.dumps(report, indent=1) + err
    assert _status(report) == {f"node{i}": "ok" for i in range(1, 6)}
    assert report["slow_links"] == [] and report["perf"]["backend"] == "gloo"
    # three rounds of two pairs (one node sits each round out), then all five nodes
    assert [len(r) for r in report["perf"]["pairings"]] == [2, 2, 2]
    for node in report["nodes"]:
        assert node["checksum_match"] is True and node["gemm_tflops"] > 0
        assert len(node["busbw_inter_gbps"]) in (2, 3) and all(p["gbps"] > 0 for p in node["busbw_inter_gbps"])
        assert node["busbw_intra_gbps"] is None  # one task per node
    assert report["perf"]["busbw_world_gbps"] > 0
    assert "one task per node: the all-reduce within a node is skipped" in report["notes"]
    # the testbed's nodes are network namespaces of one machine: measured in turns, and said so
    assert any(n.startswith("nodes share one kernel") for n in report["notes"]), report["notes"]


def test_node_with_a_slow_link_is_named_and_no_other(ck: CLI, testbed5: Testbed, tmp_path: Path) -> None:
    testbed5.wait_idle()
    with _tc(testbed5, "node3", "tbf", "rate", "100mbit", "burst", "64kb", "latency", "400ms"):
        code, report, err = _perf(ck, testbed5, tmp_path)
    assert code == 1, json.dumps(report, indent=1) + err
    assert _status(report) == {"node1": "ok", "node2": "ok", "node3": "slow", "node4": "ok", "node5": "ok"}, \
        _why(report)
    node3 = next(n for n in report["nodes"] if n["host"] == "node3")
    assert "all-reduce with every peer low" in node3["reason"], node3
    assert report["slow_links"] == []  # node3's pairs are explained by node3
    assert report["failed"] == "node3"
    print("[figures] perf, node3 at 100 Mbit/s: matmul TFLOP/s "
          + ", ".join(f"{n['host']} {n['gemm_tflops']:g}" for n in report["nodes"])
          + f"; median {report['perf']['medians']['gemm_tflops']:g}")


@contextmanager
def _one_link(bed: Testbed, node: str, peer: str, rate: str) -> Iterator[None]:
    """``node``'s packets to ``peer`` only through an htb class of ``rate``; its other traffic is
    unclassified and leaves unshaped (htb without a default class).  htb + u32, not prio + tbf:
    this kernel has no sch_prio."""
    tc = ["ip", "netns", "exec", bed.netns(node), "tc"]
    dev = bed.iface(node)
    try:
        for argv in ([*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb"],
                     [*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb", "rate", rate,
                      "ceil", rate, "burst", "64kb", "cburst", "64kb"],
                     [*tc, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                      "match", "ip", "dst", f"{bed.addr(peer)}/32", "flowid", "1:20"]):
            subprocess.run(argv, check=True, capture_output=True, timeout=10)
        yield
    finally:
        subprocess.run([*tc, "qdisc", "del", "dev", dev, "root"], capture_output=True, timeout=10)


def test_one_slowed_link_is_named_with_both_ends_and_no_node(ck: CLI, testbed5: Testbed, tmp_path: Path) -> None:
    """node3 -> node4 at 500 Mbit/s, a fifth of the pairs' usual figure here: node3-node4 (a pair of
    round 1) is low, node3's and node4's other pairs are not, so neither node is slow on the
    network; the check names the link."""
    testbed5.wait_idle()
    with _one_link(testbed5, "node3", "node4", "500mbit"):
        code, report, err = _perf(ck, testbed5, tmp_path)
    assert code == 1, json.dumps(report, indent=1) + err
    assert [(sorted(link["nodes"]), link["round"]) for link in report["slow_links"]] == [(["node3", "node4"], 1)], \
        report
    assert not [n["host"] for n in report["nodes"] if any(c["check"] == "perf.inter" for c in n["checks"])], report
    node3 = next(n for n in report["nodes"] if n["host"] == "node3")
    floor = report["slow_links"][0]["floor"]
    assert [p["peer"] for p in node3["busbw_inter_gbps"] if p["gbps"] < floor] == ["node4"], node3


def _worker_in_rendezvous(bed: Testbed, node: str) -> bool:
    """Whether a perf worker among ``node``'s processes (its cgroup's) has a TCP connection
    established with another testbed node: it has imported torch and is in its process group's
    rendezvous, not yet measuring."""
    cgroup = bed.cgroup(node)
    assert cgroup is not None
    # the other nodes' IPv4 addresses as /proc/net/tcp writes them (bytes reversed, hex)
    peers = {"".join(f"{int(b):02X}" for b in reversed(v.split("."))) for k, v in bed.exports.items()
             if k.startswith("SLURMLAB_ADDR_") and k != f"SLURMLAB_ADDR_{node}"}
    pids = {word for f in cgroup.rglob("cgroup.procs") for word in f.read_text().split()}
    for pid in pids:
        try:
            if b"clusterkit.preflight.perf_worker" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
            inodes = {link[8:-1] for link in links if link.startswith("socket:[")}
            for table in ("tcp", "tcp6"):
                for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                    f = row.split()
                    # remote address (IPv4, or IPv4-mapped in tcp6), state 01 (ESTABLISHED), inode
                    if f[3] == "01" and f[9] in inodes and f[2].split(":")[0][-8:] in peers:
                        return True
        except OSError:  # the process ended meanwhile
            continue
    return False


@contextmanager
def _cpu_quota_from_rendezvous(bed: Testbed, node: str, percent: int, proc: subprocess.Popen[str]) -> Iterator[None]:
    """``percent`` of one CPU for ``node`` (:func:`_cpu_quota`) from the moment its perf worker,
    which ``proc`` starts, has imported torch and joined the rendezvous, to the end of the block:
    the measurement runs under the quota, torch's import does not (under 2 % of a core it took
    a minute and a half)."""
    cgroup = bed.cgroup(node)
    assert cgroup is not None
    deadline = time.monotonic() + 300
    while not _worker_in_rendezvous(bed, node):
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"ended before {node}'s perf worker joined the rendezvous:\n"
                                 f"{out[-3000:]}{err[-3000:]}")
        assert time.monotonic() < deadline, f"{node}'s perf worker did not join the rendezvous in 300 s"
        time.sleep(0.05)
    with _cpu_quota(cgroup, percent):
        yield


def test_node_with_a_limited_cpu_fails_the_compute_check(ck: CLI, testbed5: Testbed, tmp_path: Path) -> None:
    cgroup = testbed5.cgroup("node2")
    if cgroup is None:
        pytest.skip("no cpu cgroup controller here (neither cgroup v2 cpu nor v1 cpu)")
    testbed5.wait_idle()
    # 2 % of one core: on a test cluster whose five nodes share this machine's cores, a busy
    # machine leaves each node about a tenth of a core, and a 5 % quota was then no slower than
    # its neighbours' share (the check measures wall-clock throughput, as a job feels it).
    # The quota starts once node2's worker has imported torch and joined the rendezvous: the
    # measurement comes after that (torch's import under the quota took a minute and a half).
    proc = ck.popen("preflight", "--site", str(_site(tmp_path)), "--transport", "srun", "--nodelist", "node[1-5]",
                    "--perf", "--json", env=testbed5.env(login=True))
    try:
        with _cpu_quota_from_rendezvous(testbed5, "node2", 2, proc):
            out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert out.strip(), err
    code, report = proc.returncode, json.loads(out)
    assert code == 1, json.dumps(report, indent=1) + err
    status = _status(report)
    assert status["node2"] == "slow" and [h for h, s in status.items() if s != "ok"] == ["node2"], _why(report)
    node2 = next(n for n in report["nodes"] if n["host"] == "node2")
    assert any(c["check"] == "perf.gemm" for c in node2["checks"]), _why(report)
    others = [n["gemm_tflops"] for n in report["nodes"] if n["host"] != "node2"]
    assert node2["gemm_tflops"] < 0.8 * min(others), report
    print("[figures] perf, node2 at 2 % of a core: import_s {import_s}, init_s {init_s}, measure_s {measure_s}"
          .format(**report["perf"]))



def test_a_drained_node_is_named_and_the_rest_measured(ck: CLI, testbed5: Testbed, tmp_path: Path) -> None:
    """Before: the step waited for the drained node and called every node unreachable."""
    testbed5.wait_idle()
    testbed5.run("scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=ck-perf-drain")
    try:
        proc = ck.proc("preflight", "--site", str(_site(tmp_path)), "--transport", "srun", "--nodelist",
                       "node[1-3]", "--perf", "--json", env=testbed5.env(login=True), timeout=300)
    finally:
        testbed5.resume("node2")
    report = json.loads(proc.out)
    assert proc.code == 3, json.dumps(report, indent=1) + proc.err
    assert [n["host"] for n in report["nodes"]] == ["node1", "node2", "node3"]
    status = _status(report)
    assert status["node2"] == "unreachable" and status["node1"] == status["node3"] == "ok", _why(report)
    node2 = report["nodes"][1]
    assert node2["reason"].startswith("drained in Slurm (State=IDLE+DRAIN, Reason=ck-perf-drain): not checked")
    assert report["perf"]["pairings"] == [[["node1", "node3"]]], report["perf"]
