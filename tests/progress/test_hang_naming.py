"""The supervisor's watcher on real torch ranks (gloo over loopback, three processes on this
machine, each with its own node name): a rank that stops (SIGSTOP), a rank stuck alive
before its next collective, and a rank stuck in a C call holding the interpreter's lock, are found
stalled and named with their node from the ranks' own progress files; the ranks' stack dumps
(faulthandler on SIGWINCH, sent here to the rank processes as the supervisor sends it down a
launcher's tree) show where each one is.  Every wait is for a state (the watcher's verdict),
within a deadline."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterkit import stackdump
from clusterkit.supervise import ranks, stall
from clusterkit.supervise.watch import Watcher, stalled_verdict
from tests.conftest import REPO

pytest.importorskip("torch", reason="the ranks are torch ranks (pip install torch, CPU build)")
pytestmark = pytest.mark.torch

N, JOB = 3, "4242"
LIMITS = stall.Limits(floor_s=4.0, factor=10.0, warmup_steps=3, save_s=1800.0)


def _start(tmp: Path) -> list[subprocess.Popen[bytes]]:
    (tmp / "logs").mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(N):
        env = {**os.environ, "RANK": str(r), "WORLD_SIZE": str(N), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "CK_PROGRESS_FILE": str(tmp / "logs" / f"{JOB}.progress"), "SLURMD_NODENAME": f"node{r + 1}",
               "PYTHONPATH": str(REPO / "toolkit"), "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, str(REPO / "tests" / "progress" / "hang_job.py"), str(tmp)],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def _until(what, deadline: float, procs: list[subprocess.Popen[bytes]]):   # type: ignore[no-untyped-def]
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        assert all(p.poll() is None for p in procs), "a rank ended"
        time.sleep(0.2)
    raise AssertionError("deadline passed")


def _send(procs: list[subprocess.Popen[bytes]]):   # type: ignore[no-untyped-def]
    def send() -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(stackdump.SIGNAL)
    return send


@pytest.mark.parametrize("fault", ["stop", "stuck", "gil"])
def test_a_hung_rank_is_found_and_named_with_its_node(tmp_path: Path, fault: str) -> None:
    procs = _start(tmp_path)
    try:
        said: list[str] = []
        w = Watcher(LIMITS, str(tmp_path), JOB, 0, 0, said.append, _send(procs))
        deadline = time.monotonic() + 120

        def ready() -> bool:   # every rank beats, and the watcher is past its warm-up
            w.check()
            lines = ranks.read_all(tmp_path / "logs", JOB)
            return len(lines) == N and all(x.coll is not None for x in lines) and \
                stall.limit_s(list(w.seen), LIMITS) is not None

        _until(ready, deadline, procs)
        if fault == "stop":
            procs[1].send_signal(signal.SIGSTOP)
        else:
            (tmp_path / f"{fault}1").touch()
        found = _until(w.check, deadline, procs if fault == "stuck" else [procs[0], procs[2]])
        v = stalled_verdict(found, w.behind)
        assert w.behind is not None and w.behind.ranks == (1,) and v.node == "node2" and v.rank == 1, v.summary
        # by whichever told first: a heartbeat that stood still, a lower step, where the rank is, or its dump
        last = "no stack dump came" if fault == "stop" else "outside any collective"
        why = ("its heartbeat stopped", "at step", last)
        assert w.behind.why.startswith(why), w.behind.why
        # the stack dumps: the others wait in the all-reduce; rank 1 is where it hangs, or silent when stopped
        got = {d.rank: d for d in w.stacks}
        assert set(got) == {0, 1, 2} and got[0].collective and got[2].collective, said
        assert "all_reduce" in " ".join(got[0].frames), got[0].frames
        if fault == "stop":
            assert not got[1].frames and "its stack" not in w.behind.why, (got[1], w.behind.why)
        else:
            assert not got[1].collective and any("hang_job.py" in f and " in main" in f for f in got[1].frames)
            top = "hang_job.py line" if fault == "stuck" else "__init__.py line"
            assert got[1].top.startswith(top) and f"its stack: {got[1].top}" in w.behind.why, (got[1], w.behind.why)
        assert any(x.startswith("watch: stack dumps: rank 1 on node2: ") for x in said), said
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait()
