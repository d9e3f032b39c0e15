"""SSHRunner on a run large enough for worker processes: 120 real sshd nodes plus dead and
tarpit addresses.  Every node is reported exactly once, from the calling process, in input
order; bad nodes stay bounded by the connect timeout; Ctrl-C still returns what finished.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from clusterkit.nodes.transport import ErrorKind, NodeOutput, RunResults
from clusterkit.nodes.transport.workers import MIN_HOSTS, cores, fan_out_processes, worker_count

from .lab import REFUSED, TARPIT, SSHLab
from .test_runner import DRIVER, drive

NODES = [f"p{i:03d}" for i in range(1, 121)]
BAD = {"pdead1": REFUSED, "pdead2": REFUSED, "ptarpit": TARPIT}
HOSTS = NODES[:60] + list(BAD) + NODES[60:]  # the bad ones in the middle of the list


@pytest.fixture(scope="module")
def big_lab(sshlab_factory: Any) -> SSHLab:
    return sshlab_factory({**{n: "_runner_echo" for n in NODES}, **BAD}, log_level="ERROR")


def test_worker_processes_report_every_node_once_in_order(big_lab: SSHLab) -> None:
    assert len(HOSTS) >= MIN_HOSTS
    out = drive(big_lab, HOSTS, 'node-info', fanout=16, connect_timeout_s=3)
    if cores() >= 2:
        assert out["children"] >= 2, out["children"]  # the run was split over processes
    assert out["children_left"] == 0  # and they were reaped
    assert out["order"] == HOSTS
    res = out["results"]
    for host in NODES:
        assert res[host]["ok"], res[host]
        assert res[host]["stdout"].startswith(f"node={host}\n"), res[host]  # its own node, once
    assert {res[h]["error"] for h in ("pdead1", "pdead2")} == {"refused"}
    assert res["ptarpit"]["error"] == "timeout" and res["ptarpit"]["duration_s"] < 3 * 3 + 5


def test_progress_hears_each_node_once_before_the_run_returns(big_lab: SSHLab) -> None:
    req = {"runner": "ssh", "hosts": HOSTS, "script": "true", "fanout": 16, "timeout_s": 10,
           "options": {"known_hosts": str(big_lab.known_hosts), "connect_timeout_s": 3}}
    proc = big_lab.run([sys.executable, str(DRIVER), json.dumps(req)], capture_output=True,
                       text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    done = [line.split(" ", 1)[1] for line in proc.stderr.splitlines() if line.startswith("done ")]
    assert sorted(done) == sorted(HOSTS)  # one progress call per node, none twice
    assert "Traceback" not in proc.stderr


def test_ctrl_c_with_worker_processes_returns_what_finished(big_lab: SSHLab) -> None:
    script = 'case "$CLUSTERKIT_LAB_NODE" in p00[1-4]) echo quick;; *) sleep 60;; esac'
    req = {"runner": "ssh", "hosts": NODES, "script": script, "fanout": 64, "timeout_s": 120,
           "options": {"known_hosts": str(big_lab.known_hosts), "connect_timeout_s": 3}}
    proc = big_lab.popen([sys.executable, str(DRIVER), json.dumps(req)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()
    assert first.startswith("done p00"), first
    proc.send_signal(signal.SIGINT)  # to the calling process only, as `kill -INT` would
    stdout, stderr = proc.communicate(timeout=30)  # promptly, not after 60 s
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    out = json.loads(stdout)
    assert out["interrupted"] is True and out["order"] == NODES
    assert out["children_left"] == 0
    res = out["results"]
    quick = [h for h in NODES if res[h]["ok"]]
    assert quick and set(quick) <= {"p001", "p002", "p003", "p004"}
    assert all(res[h]["error"] == "interrupted" for h in NODES if h not in quick)


def test_worker_processes_are_bounded_by_cores_fanout_and_size() -> None:
    assert worker_count(MIN_HOSTS - 1, 64, ncores=16) == 1      # small runs stay in-process
    assert worker_count(4096, 64, ncores=16) == 8               # 8 threads each at least: 64 / 8
    assert worker_count(4096, 256, ncores=16) == 16             # one per core
    assert worker_count(96, 256, ncores=16) == 3                # 32 hosts each at least
    assert worker_count(4096, 64, ncores=1) == 1
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(worker_count(4096, 64, ncores=16)))
    t.start()
    t.join()
    assert seen == [1]  # off the main thread (no Ctrl-C there): in-process


def _chunk(share: Sequence[str], send: Callable[[NodeOutput], None]) -> RunResults:
    """A worker's share without SSH (the fan-out across processes is what is under test):
    ``stuck*`` hangs the whole worker, ``dies*`` kills it, others answer."""
    import os
    import time

    for host in share:
        if host.startswith("stuck"):
            time.sleep(60)
        if host.startswith("dies"):
            os._exit(9)
        send(NodeOutput(host, 0, f"{host}\n"))
    return RunResults((h, NodeOutput(h, 0, f"{h}\n")) for h in share)


def test_a_stalled_or_dead_worker_fails_only_its_own_nodes() -> None:
    hosts = ["a1", "stuck", "a2", "b1", "x1", "dies", "c1", "x2", "c3"]
    heard: list[str] = []
    res = fan_out_processes(hosts, _chunk, workers=3, stall_s=2, on_result=lambda r: heard.append(r.host))
    assert list(res) == hosts and sorted(heard) == sorted(hosts) and not res.interrupted
    # worker 0: a1, b1, c1 | worker 1: stuck, x1, x2 | worker 2: a2, dies, c3
    assert [h for h in hosts if res[h].ok] == ["a1", "a2", "b1", "c1"]
    assert {h: res[h].error for h in ("stuck", "x1", "x2")} == dict.fromkeys(("stuck", "x1", "x2"), ErrorKind.TIMEOUT)
    assert {h: res[h].error for h in ("dies", "c3")} == dict.fromkeys(("dies", "c3"), ErrorKind.LAUNCH)
    assert "exited unexpectedly (exit status 9)" in res["dies"].reason
