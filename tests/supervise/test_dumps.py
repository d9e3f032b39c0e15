"""The watcher asks for the ranks' stack dumps on a stall and names the rank behind from them:
a rank that gives none while the others do outweighs a lower step (what a node whose link drops
every packet looks like: every heartbeat goes on, two ranks a step behind, one rank silent).
Files in the format clusterkit.stackdump writes; the real faulthandler output is read in
tests/progress/test_stackdump.py."""

from __future__ import annotations

from pathlib import Path

from clusterkit.supervise.stall import Limits
from clusterkit.supervise.watch import Watcher, stalled_verdict

WAITING = ("Current thread 0x00000000000000aa (most recent call first):\n"
           '  File "/py/torch/autograd/graph.py", line 829 in _engine_run_backward\n'
           '  File "/job/train.py", line 120 in main\n\n')


def test_a_rank_silent_to_the_signal_is_named_over_ranks_at_a_lower_step(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    now = [1000.0]
    said: list[str] = []
    sent: list[int] = []

    def send() -> None:   # ranks 0 and 1 answer; rank 2's node is cut off
        sent.append(1)
        for r in (0, 1):
            with open(logs / f"77.progress.stack.rank{r}", "a") as fh:
                fh.write(WAITING)

    w = Watcher(Limits(floor_s=20.0, factor=10.0, warmup_steps=3, save_s=120.0), str(tmp_path), "77", 0, 0,
                said.append, send, clock=lambda: now[0])

    def beat(rank: int, step: int) -> None:
        (logs / f"77.progress.rank{rank}").write_text(
            f"step={step} time={now[0]:.3f} phase=train rank={rank} host=node{rank + 1} step_s=1.0 work_s=- "
            f"beat={now[0]:.3f} in=graph.py:_engine_run_backward coll=0\n")

    for r in (0, 1, 2):
        (logs / f"77.progress.stack.rank{r}").write_text(
            f"\n# clusterkit stack dumps: rank={r} host=node{r + 1} pid={100 + r} thread=0x00000000000000aa\n")
    for step in range(1, 9):
        (logs / "77.progress").write_text(f"step={step} time={now[0]:.3f} phase=train\n")
        for r in (0, 1, 2):
            beat(r, step if r == 0 or step < 8 else 7)
        now[0] += 1.0
        assert w.check() is None
    found = None
    for _ in range(10):                  # every heartbeat goes on; no progress
        now[0] += 3.0
        for r in (0, 1, 2):
            beat(r, 8 if r == 0 else 7)
        found = w.check()
        if found:
            break
    assert found is not None and sent == [1], said
    v = stalled_verdict(found, w.behind)
    assert v.node == "node3" and v.rank == 2, v.summary
    assert "node behind: node3 (rank 2: no stack dump came while the others' did)" in v.summary, v.summary
    assert ("watch: stack dumps: rank 2 on node3: no dump (stopped, or not answering); ranks 0,1 on node1, node2: "
            "graph.py line 829 in _engine_run_backward") in said, said
    # what the heartbeats alone said: ranks 1 and 2 a step behind, on two nodes (none dropped)
    assert w.dump_behind is not None and w.behind is w.dump_behind


def test_a_frozen_heartbeat_stays_the_name_and_gets_its_rank_s_stack(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    now = [1000.0]
    said: list[str] = []

    def send() -> None:   # every rank answers (rank 1 holds the interpreter's lock in a C call)
        for r, frame in ((0, WAITING), (1, WAITING.replace("graph.py\", line 829 in _engine_run_backward",
                                                            "re/__init__.py\", line 166 in match")), (2, WAITING)):
            with open(logs / f"77.progress.stack.rank{r}", "a") as fh:
                fh.write(frame)

    w = Watcher(Limits(floor_s=20.0, factor=10.0, warmup_steps=3, save_s=120.0), str(tmp_path), "77", 0, 0,
                said.append, send, clock=lambda: now[0])

    def beat(rank: int, step: int) -> None:
        (logs / f"77.progress.rank{rank}").write_text(
            f"step={step} time={now[0]:.3f} phase=train rank={rank} host=node{rank + 1} step_s=1.0 work_s=- "
            f"beat={now[0]:.3f}\n")

    for r in (0, 1, 2):
        (logs / f"77.progress.stack.rank{r}").write_text(
            f"# clusterkit stack dumps: rank={r} host=node{r + 1} pid={100 + r} thread=0x00000000000000aa\n")
    for step in range(1, 9):
        (logs / "77.progress").write_text(f"step={step} time={now[0]:.3f} phase=train\n")
        for r in (0, 1, 2):
            beat(r, step)
        now[0] += 1.0
        assert w.check() is None
    found = None
    for _ in range(12):                  # rank 1's heartbeat stands still
        now[0] += 3.0
        beat(0, 8)
        beat(2, 8)
        if found := w.check():
            break
    assert found is not None
    v = stalled_verdict(found, w.behind)
    assert v.node == "node2" and "its heartbeat stopped" in v.summary, v.summary
    assert v.summary.endswith("its stack: __init__.py line 166 in match)"), v.summary
