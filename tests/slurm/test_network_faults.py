"""The testbed's nodes are hosts of their own, and a fault put on one node is real.

Each node is a network namespace with its own address on a bridge (``testbed.sh``), and its
slurmd and every process it starts sit in a cgroup of their own.  ``testbed.env`` names both per
node (``SLURMLAB_NETNS_nodeI``, ``SLURMLAB_IF_nodeI``, ``SLURMLAB_CGROUP_nodeI``).  Each test
degrades node3 for real (a rate limit on its link, its link down, a CPU quota), runs job steps
(``net_probe.py``) on node3 and on a healthy node side by side, and asserts how the two compare,
measured in the same test; it undoes the fault afterwards.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .conftest import HERE, Testbed

PROBE = HERE / "net_probe.py"


def _job(bed: Testbed, tmp_path: Path, nodes: str, body: str) -> str:
    """Submit a batch job on ``nodes`` (one task each) whose script is ``body``; its id."""
    tmp_path.chmod(0o755)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\nset -u\nexport P={PROBE} D={tmp_path}\n{body}\n")
    return bed.run("sbatch", "--parsable", "-N", str(nodes.count(",") + 1), "-w", nodes, "--ntasks-per-node=1",
                   "-J", "ck-fault", f"--output={tmp_path}/job-%j.out", f"--chdir={tmp_path}",
                   str(script)).stdout.strip()


def _wait_end(bed: Testbed, job: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = bed.run("squeue", "-h", "--states=all", "-j", job, "-o", "%T").stdout.strip()
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state
        time.sleep(0.3)
    raise AssertionError(f"job {job} still {state} after {timeout}s")


def _seconds(path: Path) -> float:
    return float(json.loads(path.read_text())["seconds"])


def _ip(bed: Testbed, node: str, *args: str) -> None:
    subprocess.run(["ip", "-n", bed.netns(node), *args], check=True, capture_output=True, text=True, timeout=10)


def test_nodes_are_hosts_of_their_own(testbed: Testbed, tmp_path: Path) -> None:
    """Each step sees its own hostname and address on its interface, and reaches the others by name."""
    testbed.wait_idle()
    iface = testbed.iface("node1")  # eth0 on every node
    job = _job(testbed, tmp_path, "node1,node2,node3,node4",
               f'srun bash -c \'ip -4 -o addr show dev {iface} > "$D/addr-$(hostname)"\'\n'
               'srun -N1 -n1 -w node1 python3 "$P" serve 24601 3 &\n'
               'for n in 2 3 4; do srun -N1 -n1 -w node$n python3 "$P" send node1 24601 1000 "$D/sent$n" & done\n'
               'wait')
    assert _wait_end(testbed, job) == "COMPLETED", (tmp_path / f"job-{job}.out").read_text()
    for node in testbed.nodes:
        words = (tmp_path / f"addr-{node}").read_text().split()
        assert words[1:4] == [iface, "inet", f"{testbed.addr(node)}/24"], (node, words)
    assert len({testbed.addr(n) for n in testbed.nodes}) == 4
    for n in (2, 3, 4):
        assert json.loads((tmp_path / f"sent{n}").read_text())["node"] == f"node{n}"
    # nothing of the cluster's network is on this machine's own interfaces
    here = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    assert not any(testbed.addr(n) in here for n in testbed.nodes), here


@contextmanager
def _tc(bed: Testbed, node: str, *qdisc: str) -> Iterator[None]:
    dev = bed.iface(node)
    _ip_tc = ["ip", "netns", "exec", bed.netns(node), "tc", "qdisc"]
    subprocess.run([*_ip_tc, "add", "dev", dev, "root", *qdisc], check=True, capture_output=True, timeout=10)
    try:
        yield
    finally:
        subprocess.run([*_ip_tc, "del", "dev", dev, "root"], check=True, capture_output=True, timeout=10)


def test_rate_limited_link_makes_transfers_from_that_node_slower(testbed: Testbed, tmp_path: Path) -> None:
    """node3's link limited (tc on its interface): node3 -> node1 is slower than node2 -> node1.

    ``tbf``, not ``netem rate``: this kernel has no sch_netem (``tc`` answers "Specified qdisc
    kind is unknown"); tbf limits the rate the same way on the node's egress.
    """
    testbed.wait_idle()
    size = 2_000_000
    with _tc(testbed, "node3", "tbf", "rate", "4mbit", "burst", "16kb", "latency", "500ms"):
        job = _job(testbed, tmp_path, "node1,node2,node3",
                   'srun -N1 -n1 -w node1 python3 "$P" serve 24602 2 &\n'
                   f'srun -N1 -n1 -w node2 python3 "$P" send node1 24602 {size} "$D/via2"\n'
                   f'srun -N1 -n1 -w node3 python3 "$P" send node1 24602 {size} "$D/via3"\n'
                   'wait')
        assert _wait_end(testbed, job) == "COMPLETED", (tmp_path / f"job-{job}.out").read_text()
    fast, slow = _seconds(tmp_path / "via2"), _seconds(tmp_path / "via3")
    assert slow > 5 * fast, (fast, slow)


def test_link_down_cuts_a_running_step_off_from_node1(testbed: Testbed, tmp_path: Path) -> None:
    """node3's link down while steps on node2 and node3 keep connecting to node1: node3's fail,
    node2's do not, and node3's succeed again once the link is back."""
    testbed.wait_idle()
    stop = tmp_path / "stop"
    job = _job(testbed, tmp_path, "node1,node2,node3",
               'srun -N1 -n1 -w node1 python3 "$P" serve 24603 1000000 & S=$!\n'
               'srun -N1 -n1 -w node2 python3 "$P" reach node1 24603 "$D/reach2" "$D/stop" & A=$!\n'
               'srun -N1 -n1 -w node3 python3 "$P" reach node1 24603 "$D/reach3" "$D/stop" & B=$!\n'
               'wait $A $B; kill $S; wait')

    def lines(n: int) -> list[str]:
        p = tmp_path / f"reach{n}"
        return p.read_text().splitlines() if p.exists() else []

    def wait_for(pred: Callable[[], bool], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < deadline, f"{what}: node2 {lines(2)[-5:]}, node3 {lines(3)[-5:]}"
            time.sleep(0.2)

    try:
        wait_for(lambda: any(ln.endswith(" ok") for ln in lines(3)) and any(ln.endswith(" ok") for ln in lines(2)),
                 "both steps reach node1 first")
        _ip(testbed, "node3", "link", "set", testbed.iface("node3"), "down")
        down_at = time.time()
        try:
            wait_for(lambda: sum(" fail" in ln for ln in lines(3)) >= 3, "node3 fails with its link down")
        finally:
            up_at = time.time()   # before the link is up: a line stamped earlier was written while it was down
            _ip(testbed, "node3", "link", "set", testbed.iface("node3"), "up")
        wait_for(lambda: any(ln.endswith(" ok") and float(ln.split()[0]) > up_at for ln in lines(3)),
                 "node3 reaches node1 again")
    finally:
        stop.touch()
    assert _wait_end(testbed, job) == "COMPLETED", (tmp_path / f"job-{job}.out").read_text()
    node3_during = [ln.split(maxsplit=1)[1] for ln in lines(3) if down_at < float(ln.split()[0]) < up_at]
    node2_during = [ln.split(maxsplit=1)[1] for ln in lines(2) if down_at < float(ln.split()[0]) < up_at]
    assert node3_during and node2_during
    assert all(r.startswith("fail") for r in node3_during), node3_during
    assert all(r == "ok" for r in node2_during), node2_during


@contextmanager
def _cpu_quota(cgroup: Path, percent: int) -> Iterator[None]:
    """At most ``percent`` of one CPU for the cgroup's processes: cgroup v2 cpu.max or v1 cfs quota."""
    period = 100_000
    if (cgroup / "cpu.max").exists():
        (cgroup / "cpu.max").write_text(f"{period * percent // 100} {period}\n")
        try:
            yield
        finally:
            (cgroup / "cpu.max").write_text(f"max {period}\n")
    else:
        (cgroup / "cpu.cfs_period_us").write_text(f"{period}\n")
        (cgroup / "cpu.cfs_quota_us").write_text(f"{period * percent // 100}\n")
        try:
            yield
        finally:
            (cgroup / "cpu.cfs_quota_us").write_text("-1\n")


def test_cpu_quota_slows_a_compute_loop_on_that_node_only(testbed: Testbed, tmp_path: Path) -> None:
    cgroup = testbed.cgroup("node3")
    if cgroup is None:
        pytest.skip("no cpu cgroup controller here (neither cgroup v2 cpu nor v1 cpu)")
    testbed.wait_idle()
    # the same loop on node2 and node3, one after the other (this machine may have 2 cores)
    with _cpu_quota(cgroup, 10):
        job = _job(testbed, tmp_path, "node2,node3",
                   'srun -N1 -n1 -w node2 python3 "$P" spin 3000000 "$D/spin2"\n'
                   'srun -N1 -n1 -w node3 python3 "$P" spin 3000000 "$D/spin3"')
        assert _wait_end(testbed, job) == "COMPLETED", (tmp_path / f"job-{job}.out").read_text()
    free, limited = _seconds(tmp_path / "spin2"), _seconds(tmp_path / "spin3")
    assert json.loads((tmp_path / "spin3").read_text())["node"] == "node3"
    assert limited > 3 * free, (free, limited)
