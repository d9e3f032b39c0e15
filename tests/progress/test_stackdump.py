"""Stack dumps on demand (clusterkit.stackdump): a real process reporting progress gets SIGWINCH and
Python's faulthandler writes its threads to its rank's stack file; the reader finds the training
thread's frames after the supervisor's mark.  Waits are for the file's state, within a deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from clusterkit import stackdump
from clusterkit.diagnose.doctor import stack_dumps
from clusterkit.supervise.dumps import Dumps, descendants, sender
from tests.conftest import REPO

RANK_SCRIPT = textwrap.dedent("""
    import os, signal, sys, threading, time
    import clusterkit
    if sys.argv[1] == "own":
        signal.signal(signal.SIGWINCH, lambda *a: None)
    clusterkit.progress(1)
    if sys.argv[1] == "fork":
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        open(sys.argv[2], "w").write(str(pid))
    def waiting_for_data():
        threading.Event().wait(60)
    open(sys.argv[2] + ".ready", "w").close()
    waiting_for_data()
""")


def _rank(tmp: Path, how: str = "plain", rank: int = 1) -> subprocess.Popen[bytes]:
    (tmp / "logs").mkdir(exist_ok=True)
    env = {**os.environ, "RANK": str(rank), "CK_PROGRESS_FILE": str(tmp / "logs" / "77.progress"),
           "SLURMD_NODENAME": f"node{rank + 1}", "PYTHONPATH": str(REPO / "toolkit")}
    script = tmp / "rank.py"
    script.write_text(RANK_SCRIPT)
    ready = tmp / f"pid{rank}"
    Path(f"{ready}.ready").unlink(missing_ok=True)   # an earlier process's mark must not pass for this one's
    p = subprocess.Popen([sys.executable, str(script), how, str(ready)], env=env)
    _until(lambda: Path(f"{ready}.ready").exists())
    return p


def _until(what, limit: float = 30.0):   # type: ignore[no-untyped-def]
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if got := what():
            return got
        time.sleep(0.05)
    raise AssertionError("deadline passed")


def _ask(tmp: Path, p: subprocess.Popen[bytes]) -> list[stackdump.Dump]:
    d = Dumps(tmp / "logs", "77", lambda: (p.send_signal(stackdump.SIGNAL), None)[1])
    assert d.ask(set()) == 1
    _until(d.done)
    return d.read()


def test_a_rank_dumps_its_training_thread_on_sigwinch_and_the_reader_finds_its_frame(tmp_path: Path) -> None:
    p = _rank(tmp_path)
    try:
        [got] = _ask(tmp_path, p)
        assert got.rank == 1 and got.host == "node2" and got.asked is not None
        assert got.top.startswith("threading.py line ") and got.top.endswith(" in wait"), got.frames
        assert any(f.endswith(" in waiting_for_data") for f in got.frames) and not got.collective, got.frames
        assert p.poll() is None   # the signal did not end it
        # a later process of the same rank (the next attempt) registers again: the dump asked for stays the newest
        p.kill()
        p.wait()
        q = _rank(tmp_path)
        report = stack_dumps(tmp_path / "logs", "77")
        assert report is not None and report["ranks"][0]["frame"] == got.top, report
        q.kill()
        q.wait()
    finally:
        p.kill()
        p.wait()


def test_a_forked_child_does_not_dump_into_the_ranks_file_and_a_scripts_own_handler_stays(tmp_path: Path) -> None:
    p = _rank(tmp_path, "fork")
    child = int((tmp_path / "pid1").read_text())
    try:
        assert child in descendants(p.pid)
        path = tmp_path / "logs" / "77.progress.stack.rank1"
        before = path.stat().st_size
        os.kill(child, stackdump.SIGNAL)
        [got] = _ask(tmp_path, p)   # the rank's own dump, after the mark; a child's would have come before it
        assert path.read_text()[before:].startswith("# clusterkit: stack dump asked at "), path.read_text()[before:]
        assert got.frames
        assert Path(f"/proc/{child}").exists()   # SIGWINCH's default in the child: nothing
        # the launcher-tree sender reaches the rank below a launcher (here: this test's child)
        assert sender("here", "77", lambda *a: None, p)() is None   # type: ignore[arg-type,return-value]
    finally:
        os.kill(child, signal.SIGKILL)
        p.kill()
        p.wait()
    q = _rank(tmp_path, "own", rank=2)
    try:
        assert not (tmp_path / "logs" / "77.progress.stack.rank2").exists()
        q.send_signal(stackdump.SIGNAL)   # its own handler: it goes on
        assert q.poll() is None
    finally:
        q.kill()
        q.wait()


def test_the_reader_refuses_what_is_not_a_dump_and_words_the_ranks_behind(tmp_path: Path) -> None:
    head = "# clusterkit stack dumps: rank=3 host=node4 pid=12 thread=0x00000000000000aa\n"
    dump = ('# clusterkit: stack dump asked at 1700000000.5\nThread 0x00000000000000bb (most recent call first):\n'
            '  File "/x/threading.py", line 320 in wait\n\n'
            'Current thread 0x00000000000000aa (most recent call first):\n'
            '  File "/site/torch/distributed/distributed_c10d.py", line 3913 in all_reduce\n'
            '  File "/job/train.py", line 9 in main\n')
    got = stackdump.parse(head + dump, 3)
    assert got is not None and got.top == "distributed_c10d.py line 3913 in all_reduce" and got.collective
    assert got.asked == 1700000000.5 and got.frames[1] == "/job/train.py line 9 in main"
    assert stackdump.parse(head, 3) is None and stackdump.parse(head + dump, 2) is None   # nothing asked; another rank
    silent = stackdump.parse(head + "# clusterkit: stack dump asked at 1700000100\n", 3)
    assert silent is not None and not silent.frames
    out = stackdump.Dump(1, "node2", ("/job/data.py line 4 in fetch",))
    assert stackdump.behind([got, out]) == [out] and stackdump.behind([got, silent]) == [silent]
    assert stackdump.summary([got, out]).startswith("rank 1 on node2: data.py line 4 in fetch; rank 3 on node4: ")
    os.mkfifo(tmp_path / "77.progress.stack.rank0")
    assert stackdump.read(tmp_path / "77.progress.stack.rank0", 0) is None   # a FIFO is never opened for reading
    assert not stackdump.mark(tmp_path / "77.progress.stack.rank0")
