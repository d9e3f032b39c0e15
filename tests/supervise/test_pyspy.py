"""py-spy's dumps and the flight recorder's pipes on a stall (clusterkit.pyspy, supervise/spynode.py,
supervise/spy.py): a real capture read, the node side run for real (real py-spy on real processes
where it is installed: a rank stopped, ranks waiting in a function of a torch/distributed file, a
refusal by ptrace), a pipe with and without a reader, and the watcher naming the rank behind from
py-spy alone."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit import pyspy, stackdump
from clusterkit.diagnose.doctor import py_spy_dumps
from clusterkit.supervise import spy, spynode
from clusterkit.supervise.dumps import DUMP_WAIT_S
from clusterkit.supervise.stall import Limits
from clusterkit.supervise.watch import Watcher, stalled_verdict
from tests.captures.capture import captures, env_with, stand_in

HAS_PYSPY = spynode.find_pyspy() is not None
needs_pyspy = pytest.mark.skipif(not HAS_PYSPY, reason="py-spy is not installed (pip install py-spy)")

RANK = """import importlib.util, sys, threading, time
from clusterkit import stackdump
rank, logs, waiting = int(sys.argv[1]), sys.argv[2], sys.argv[3]
spec = importlib.util.spec_from_file_location("c10d", waiting)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
def main():
    stackdump.register(logs + "/77.progress", rank, "node%d" % (rank + 1), threading.get_ident())
    if rank == 2:
        time.sleep(600)          # the rank behind: in its own code
    else:
        mod.all_reduce()         # the others: waiting in a torch.distributed function
main()
"""


@pytest.mark.parametrize("cap", captures("py-spy"), ids=lambda c: c.name)
def test_a_captured_dump_reads_as_the_rank_s_frames(cap: object) -> None:
    from tests.captures.capture import Capture

    assert isinstance(cap, Capture)
    d = pyspy.parse(cap.body, 5, "node7", pid=int(cap.expected["thread"]))
    assert len(d.frames) == cap.expected["frames"]
    assert d.frames[0] == cap.expected["innermost"] and d.frames[-1] == cap.expected["outermost"]
    assert d.collective is cap.expected["in_collective"] and (d.rank, d.host) == (5, "node7")
    assert d.top == "distributed_c10d.py line 1191 in broadcast"
    # leniently: control characters dropped, lines that are neither threads nor frames skipped
    noisy = "Process 1: python\x1b[1m x\nPython v3.11\n\n" + cap.body.replace("broadcast (", "broad\x00cast (")
    assert pyspy.parse(noisy, 5).frames == d.frames
    assert pyspy.parse("Error: Failed to get process executable name\n" * 3, 5).frames == ()


def test_the_training_thread_is_picked_by_id_else_main_thread() -> None:
    text = ('Thread 0x7F00AA (idle): "Thread-1"\n    wait (threading.py:320)\n'
            'Thread 4242 (active+gil): "MainThread"\n    step (train.py:9)\n'
            'Thread 4250 (idle): "pin"\n    loop (loader.py:3)\n')
    assert pyspy.parse(text, 0).frames == ("train.py line 9 in step",)
    assert pyspy.parse(text, 0, pid=1, thread=0x7F00AA).frames == ("threading.py line 320 in wait",)
    native = 'Thread 7 (active): "MainThread"\n    c10d::ProcessGroupGloo::allreduce (libtorch_cpu.so)\n'
    assert pyspy.parse(native, 0).collective


def _fifo_reader(path: str) -> int:
    os.mkfifo(path, 0o600)
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK)   # as torch's DumpPipe opens it


def test_a_flight_recorder_pipe_is_written_without_waiting_for_a_reader(tmp_path: Path) -> None:
    assert spynode.poke_pipe(str(tmp_path / "none.pipe")) == "no pipe"
    os.mkfifo(tmp_path / "lonely.pipe")
    started = time.monotonic()
    assert spynode.poke_pipe(str(tmp_path / "lonely.pipe")) == "no reader"   # no reader: said, not waited on
    assert time.monotonic() - started < 2.0
    (tmp_path / "plain.pipe").write_text("")
    assert spynode.poke_pipe(str(tmp_path / "plain.pipe")) == "not a pipe, left alone"
    assert (tmp_path / "plain.pipe").read_text() == ""
    fd = _fifo_reader(str(tmp_path / "read.pipe"))
    try:
        assert spynode.poke_pipe(str(tmp_path / "read.pipe")) == "asked"
        assert os.read(fd, 128) == b"dump\n"
    finally:
        os.close(fd)


def test_the_node_asks_each_rank_s_pipe_by_the_job_s_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(pyspy, "FR_PIPE", str(tmp_path / "fr-{job}.r{restart}.rank"))
    fd = _fifo_reader(str(tmp_path / "fr-77.r1.rank3.pipe"))
    try:
        [line] = spynode.poke_pipes([3, 4], "77", 1)
        assert line.endswith("asked: ranks 3; no pipe: ranks 4"), line
        assert os.read(fd, 128) == b"dump\n"
    finally:
        os.close(fd)
    assert spynode.poke_pipes([5], "77", 1) == []   # no rank has a pipe (no NCCL): nothing to say


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[tuple[Path, list[subprocess.Popen[bytes]]]]:
    """Three real rank processes with their stack files: ranks 0 and 1 wait in ``all_reduce`` of a
    file under torch/distributed/, rank 2 sleeps in its own ``main``."""
    logs = tmp_path / "logs"
    logs.mkdir()
    waiting = tmp_path / "lib" / "torch" / "distributed" / "c10d_stub.py"
    waiting.parent.mkdir(parents=True)
    waiting.write_text("import time\n\ndef all_reduce():\n    time.sleep(600)\n")
    (tmp_path / "train.py").write_text(RANK)
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "train.py"), str(r), str(logs), str(waiting)])
             for r in range(3)]
    try:
        deadline = time.monotonic() + 60
        while len([f for r, f in stackdump.files(logs, "77") if stackdump.owner(f, r)]) < 3:
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "the ranks did not start"
            time.sleep(0.05)
        yield logs, procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


@needs_pyspy
def test_real_py_spy_dumps_a_stopped_rank_and_the_others(ranks: tuple[Path, list[subprocess.Popen[bytes]]]) -> None:
    logs, procs = ranks
    procs[2].send_signal(signal.SIGSTOP)       # a stopped rank: its own signal handler cannot answer
    found = spy.targets(logs, "77", ())
    parts = [re.fullmatch(r"(\d+):(\d+):([0-9a-f]+)@(\S+)", t) for t in found]
    targets = [(int(m[1]), int(m[2]), int(m[3], 16), m[4]) for m in parts if m]
    lines = spynode.dump_ranks(targets, logs, "77", time.time(), spynode.find_pyspy() or "")
    assert len(lines) == 3 and all("py-spy dumped pid" in ln for ln in lines), lines
    got = {d.rank: d for d in pyspy.read_all(logs, "77")}
    assert got[2].frames[0].endswith("train.py line 9 in main") and not got[2].collective, got[2]
    assert got[0].collective and got[0].frames[0].endswith("c10d_stub.py line 4 in all_reduce"), got[0]
    assert [d.rank for d in stackdump.behind(list(got.values()))] == [2]
    # doctor reads them back the same way: the rank behind and its node
    report = py_spy_dumps(logs, "77")
    assert report is not None and [(d["rank"], d["node"]) for d in report["behind"]] == [(2, "node3")], report
    assert report["summary"].startswith("rank 2 on node3: train.py line 9 in main; ranks 0,1 on node1, node2: "), report


def test_no_py_spy_is_said_once_and_the_pipes_are_still_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(spynode, "find_pyspy", lambda: None)
    assert spynode.main(["--logs", str(tmp_path), "--job", "77", "--asked", "1.0", "--all", "0:1:aa@n1",
                         "1:2:aa@n1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("py-spy is not installed on "), out
    assert spynode.main(["--logs", str(tmp_path), "--job", "77", "--asked", "1.0", "0:1:aa@elsewhere"]) == 0
    assert capsys.readouterr().out == ""   # another node's rank: not this node's to dump


def test_a_captured_dump_through_the_node_side_with_a_stand_in_py_spy(tmp_path: Path) -> None:
    """The node side end to end, with a stand-in ``py-spy`` printing the capture (one ``cat``)."""
    cap = captures("py-spy")[0]
    stand_in(tmp_path / "bin", "py-spy", cap.body)
    logs = tmp_path / "logs"
    logs.mkdir()
    env = {**env_with(tmp_path / "bin"), "SLURMD_NODENAME": "node4"}
    run = subprocess.run([sys.executable, "-m", "clusterkit.supervise.spynode", "--logs", str(logs), "--job", "77",
                          "--asked", "1700000000.5", "3:835995:aa@node4", "4:9:aa@node5"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout == "rank 3 on node4: py-spy dumped pid 835995\n", run
    [d] = pyspy.read_all(logs, "77")
    assert (d.rank, d.host, d.asked, d.top) == (3, "node4", 1700000000.5, "distributed_c10d.py line 1191 in broadcast")


@pytest.mark.skipif(os.geteuid() != 0 or not HAS_PYSPY or not shutil.which("runuser"),
                    reason="needs root, runuser and py-spy: py-spy run as nobody is refused a root process")
def test_a_ptrace_refusal_is_a_line_not_a_failure(ranks: tuple[Path, list[subprocess.Popen[bytes]]],
                                                  tmp_path: Path) -> None:
    logs, procs = ranks
    reachable = Path(tempfile.mkdtemp(prefix="ck-pyspy-"))   # pytest's own tmp is root's alone
    try:
        reachable.chmod(0o755)
        exe = reachable / "py-spy"
        shutil.copy(spynode.find_pyspy() or "", exe)
        exe.chmod(0o755)
        wrapper = tmp_path / "as-nobody"
        wrapper.write_text(f'#!/bin/sh\nexec runuser -u nobody -- {exe} "$@"\n')
        wrapper.chmod(0o755)
        ran = subprocess.run([str(wrapper), "--version"], capture_output=True, text=True, timeout=30)
        assert ran.stdout.startswith("py-spy "), ran   # py-spy itself runs as nobody: the refusal is ptrace's
        [line] = spynode.dump_ranks([(0, procs[0].pid, 1, "node1")], logs, "77", time.time(), str(wrapper))
    finally:
        shutil.rmtree(reachable)
    assert "rank 0 on" in line and "py-spy: permission denied" in line and "ptrace" in line, line
    assert pyspy.read_all(logs, "77") == []   # no file for a failed dump: never read as a silent rank


@needs_pyspy
def test_the_watcher_names_the_rank_behind_from_py_spy_alone(
        ranks: tuple[Path, list[subprocess.Popen[bytes]]]) -> None:
    """Every heartbeat goes on at one step and no faulthandler dump comes: only py-spy tells rank 2 apart."""
    logs, _ = ranks
    now = [1000.0]
    said: list[str] = []
    w = Watcher(Limits(floor_s=20.0, factor=10.0, warmup_steps=3, save_s=120.0), str(logs.parent), "77", 0, 0,
                said.append, lambda: None, clock=lambda: now[0], spy_mode="here")

    def beat(step: int) -> None:
        (logs / "77.progress").write_text(f"step={step} time={now[0]:.3f} phase=train\n")
        for r in range(3):
            (logs / f"77.progress.rank{r}").write_text(
                f"step={step} time={now[0]:.3f} phase=train rank={r} host=node{r + 1} step_s=1.0 work_s=- "
                f"beat={now[0]:.3f} in=c10d_stub.py:all_reduce coll=1\n")

    for step in range(1, 9):
        beat(step)
        now[0] += 1.0
        assert w.check() is None
    now[0] += 20.0                                          # past the stall limit
    found = None
    deadline = time.monotonic() + 60
    while found is None and time.monotonic() < deadline:   # until the nodes' side has answered
        now[0] += 0.05
        found = w.check()
        time.sleep(0.02)
    assert found is not None, said
    assert any(s.startswith("watch: py-spy dumps: rank 2 on node3: train.py line 9 in main;") for s in said), said
    v = stalled_verdict(found, w.behind)
    assert v.node == "node3" and v.rank == 2, v.summary
    assert "outside any collective while the others wait in one, by py-spy: train.py line 9 in main" in v.summary


def test_what_the_nodes_say_of_py_spy_missing_is_logged_once_a_node(tmp_path: Path) -> None:
    spy._said.clear()
    s = spy.Spy(tmp_path, "77", 0, "here")
    for _ in range(2):
        s.out = tempfile.NamedTemporaryFile()  # noqa: SIM115 (Spy.lines closes it)
        s.out.write(b"py-spy is not installed on n1 (x)\nrank 0 on n2: py-spy: permission denied (a)\n"
                    b"rank 1 on n2: py-spy: permission denied (a)\nrank 2 on n2: py-spy dumped pid 9\n"
                    b"rank 3 on n3: py-spy could not read pid 4 (status 1): gone\x1b\n")
        got = s.lines()
        first = ["py-spy is not installed on n1 (x)", "rank 0 on n2: py-spy: permission denied (a)"]
        assert got == ([] if _ else first) + ["rank 3 on n3: py-spy could not read pid 4 (status 1): gone"], got


def test_the_job_exports_the_pipe_stem_the_node_side_writes_to() -> None:
    from clusterkit.config.load import load_site
    from clusterkit.job import nccl
    from tests.conftest import REPO

    site = load_site(str(REPO / "site_configs" / "eth-nfs.yaml"))
    env = {v.name: v for v in nccl.policy(site, "multi-node", run_dir="/runs/x")}
    stem = pyspy.FR_PIPE.format(job="${CK_JOB_ID}", restart="${SLURM_RESTART_COUNT:-0}")
    for name in ("TORCH_FR_DEBUG_INFO_PIPE_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"):
        assert env[name].value == stem and env[name].shell == f'"{stem}"', env[name]
    assert ("TORCH_FR_DEBUG_INFO_PIPE_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE") in nccl.fr_pairs(list(env.values()))


def test_a_node_side_that_never_answers_does_not_hold_a_stall_named_otherwise(tmp_path: Path) -> None:
    """A stand-in for a node cut off: the node side never ends.  Rank 2's heartbeat stood still, which
    names it: the stall is reported once the stack dumps' wait is over, and the node side is ended."""
    logs = tmp_path / "logs"
    logs.mkdir()
    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(600)\n")
    now = [1000.0]
    said: list[str] = []
    asked: list[float] = []

    def log(line: str) -> None:
        said.append(line)
        if "asking py-spy" in line:
            asked.append(now[0])

    w = Watcher(Limits(floor_s=20.0, factor=10.0, warmup_steps=3, save_s=120.0), str(tmp_path), "77", 0, 0,
                log, lambda: None, clock=lambda: now[0], spy_mode="here")
    assert w.spy is not None
    w.spy.python = sys.executable
    w.spy.argv = lambda found: [sys.executable, str(hang)]  # type: ignore[method-assign]
    for r in range(3):
        (logs / f"77.progress.stack.rank{r}").write_text(
            f"\n# clusterkit stack dumps: rank={r} host=node{r + 1} pid={100 + r} thread=0x00000000000000aa\n")

    def beat(step: int, progress: bool = True) -> None:
        if progress:
            (logs / "77.progress").write_text(f"step={step} time={now[0]:.3f} phase=train\n")
        for r in range(3):
            at = 1007.0 if r == 2 and now[0] > 1007.0 else now[0]    # rank 2's beat stands still from step 8
            (logs / f"77.progress.rank{r}").write_text(
                f"step={min(step, 8)} time={at:.3f} phase=train rank={r} host=node{r + 1} step_s=1.0 work_s=- "
                f"beat={at:.3f} in=c10d_stub.py:all_reduce coll=1\n")

    for step in range(1, 9):
        beat(step)
        now[0] += 1.0
        assert w.check() is None
    found = None
    for _ in range(40):
        now[0] += 1.0
        beat(8, progress=False)
        found = w.check()
        if found:
            break
    assert found is not None, said
    assert w.spy.proc is not None and w.spy.proc.poll() is not None   # ended, not left running
    assert asked and now[0] - asked[0] <= DUMP_WAIT_S + 1.0, (asked, now[0])   # not py-spy's 20 s
    assert any("py-spy: py-spy's step had not ended after" in s for s in said), said
    v = stalled_verdict(found, w.behind)
    assert v.node == "node3" and "its heartbeat stopped" in v.summary, v.summary
