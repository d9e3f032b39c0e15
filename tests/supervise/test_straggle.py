"""Replacing a straggler at a checkpoint (supervise/straggle.py decides, supervise/straggle_watch.py
reads the ranks' files and the progress log for it): when a straggler stays one, which save it is
replaced at, what recovery is told, and when it is kept instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.heartbeat import Progress
from clusterkit.supervise import replan, straggle
from clusterkit.supervise.ranks import Straggler
from clusterkit.supervise.recovery import Run
from clusterkit.supervise.straggle import Look, finished_save, kept_because, one_node, persistent, verdict
from clusterkit.supervise.straggle_watch import Replacer, ended_why, poll_s, replacer_of

SLOW = Straggler(2, "node3", 0.9, 0.1, "work")
NODES = ("node1", "node2", "node3")


def _looks(*named: tuple[int, str | None]) -> list[Look]:
    return [Look(step, None if node is None else Straggler(2, node, 0.9, 0.1, "work")) for step, node in named]


def test_a_straggler_named_at_every_look_over_ten_steps_stays_one() -> None:
    assert persistent(_looks((20, "node3"), (25, "node3"), (30, "node3"))) == SLOW
    assert persistent(_looks((20, "node3"), (25, "node3"), (29, "node3"))) is None       # 9 steps: not yet
    assert persistent(_looks((5, "node3"), (20, None), (25, "node3"), (29, "node3"))) is None   # a look between
    assert persistent(_looks((5, "node1"), (20, "node3"), (30, "node3"))) == SLOW          # named since step 20
    assert persistent(_looks((20, "node3"), (30, None))) is None                           # the newest names none
    assert persistent([]) is None


def test_stragglers_on_several_nodes_or_off_the_attempt_name_no_node_to_replace() -> None:
    other = Straggler(0, "node1", 0.8, 0.1, "work")
    same = Straggler(3, "node3", 1.2, 0.1, "work")
    assert one_node([SLOW, same], NODES) == same          # the slowest rank of the one node
    assert one_node([SLOW, other], NODES) is None          # two nodes: none to drop
    assert one_node([SLOW], ("node1", "node2")) is None    # not a node this attempt runs on
    assert one_node([], NODES) is None


def _marks(*pairs: tuple[int, str]) -> list[Progress]:
    return [Progress(step, 1.7e9 + i, phase) for i, (step, phase) in enumerate(pairs)]


def test_the_save_that_ends_after_the_straggler_stayed_one_is_the_checkpoint() -> None:
    marks = _marks((0, "train"), (3, "save"), (3, "train"), (6, "save"), (6, "train"), (9, "save"))
    assert finished_save(marks, 0) == 6        # the newest that ended: the checkpoint training resumes from
    assert finished_save(marks[:4], 0) == 3
    assert finished_save(marks, 3) == 6        # the save at 3 ended before: not this one
    assert finished_save(marks, 5) is None     # the save at 9 has not ended yet
    assert finished_save(marks[:4], 4) is None
    # a new process's first mark after a save that never ended (a lower step): no save ended
    assert finished_save(_marks((9, "save"), (6, "train")), 0) is None


def test_recovery_is_told_straggler_with_the_node_and_drops_it_for_the_spare() -> None:
    v = verdict(SLOW, 12)
    assert (v.category, v.node, v.rank) == ("straggler", "node3", 2)
    assert "9.0x the others'" in v.summary and "replaced at the checkpoint at step 12" in v.summary
    assert "straggler" in replan.RELAUNCH
    a = replan.Attempted(attempt=0, nodes=NODES, unused=("node4",), max_relaunches=3,
                         allocation=(*NODES, "node4"))
    step = replan.next_step(v, [], a)
    assert isinstance(step, replan.Relaunch) and step.nodes == ("node1", "node2", "node4"), step
    assert [h for h, _ in step.dropped] == ["node3"] and "node3 (straggler)" in step.line
    assert kept_because(v, a) is None
    said = straggle.worded(SLOW, 12)
    assert "node3" in said and "9.0x" in said and "replaced at the checkpoint at step 12" in said


def test_without_a_spare_it_is_requeued_without_the_node_or_kept_when_that_would_end_the_run() -> None:
    v = verdict(SLOW, 12)
    a = replan.Attempted(attempt=0, nodes=NODES, unused=(), max_relaunches=3, restarts_left=1, allocation=NODES)
    assert kept_because(v, a) is None     # recovery requeues without node3
    assert isinstance(replan.next_step(v, [], a), replan.RequeueWithout)
    spent = replan.Attempted(attempt=0, nodes=NODES, unused=(), max_relaunches=3, restarts_left=0, allocation=NODES)
    why = kept_because(v, spent)
    assert why is not None and "restart budget is spent" in why


# ---- the watch: the ranks' files and the progress log, as the job writes them


def _write(logs: Path, job: str, rank: int, host: str, step: int, work: float, beat: float) -> None:
    (logs / f"{job}.progress.rank{rank}").write_text(
        f"step={step} time={beat:.3f} phase=train rank={rank} host={host} step_s=1.0 work_s={work} beat={beat:.3f}\n")


def _mark(logs: Path, job: str, step: int, phase: str) -> None:
    with open(logs / f"{job}.progress.log", "a") as f:
        f.write(f"step={step} time=1700000000.000 phase={phase}\n")


def _run(unused: tuple[str, ...] = ("node4",)) -> Run:
    return Run("7", "/r", 0, (*NODES, "node4"), NODES, unused, 3)


def test_the_watch_replaces_node3_at_the_save_that_ends_after_it_stayed_a_straggler(tmp_path: Path) -> None:
    logs, said = tmp_path / "logs", []
    logs.mkdir()
    for r, host in enumerate(NODES):   # an earlier attempt's files: node3 slow there too, never counted
        _write(logs, "7", r, host, 40, 0.9 if host == "node3" else 0.1, 1.0)
    w = Replacer(1.5, str(tmp_path), "7", _run(), 0, said.append)
    assert w.check() is None and not w.looks
    _mark(logs, "7", 0, "train")
    for step in (6, 11, 16, 21):
        for r, host in enumerate(NODES):
            _write(logs, "7", r, host, step, 0.9 if host == "node3" else 0.1, 100.0 + step)
        assert w.check() is None
    assert len(said) == 1 and "node3 (rank 2" in said[0] and "replaced at the next checkpoint save" in said[0]
    _mark(logs, "7", 21, "save")
    assert w.check() is None           # the save has not ended
    _mark(logs, "7", 21, "train")
    v = w.check()
    assert v is not None and (v.category, v.node, v.rank) == ("straggler", "node3", 2)
    assert "node3 (rank 2, 9.0x the others' work time per step) is replaced at the checkpoint at step 21" in said[-1]
    assert ended_why(v) == "its straggler is replaced (no doctor run)"


def test_the_watch_keeps_a_straggler_whose_replacement_would_end_the_run(tmp_path: Path) -> None:
    logs, said = tmp_path / "logs", []
    logs.mkdir()
    w = Replacer(1.5, str(tmp_path), "7", _run(unused=()), 0, said.append)   # no spare, no restart left
    for step in (6, 11, 16, 21):
        for r, host in enumerate(NODES):
            _write(logs, "7", r, host, step, 0.9 if host == "node3" else 0.1, 100.0 + step)
        assert w.check() is None
    _mark(logs, "7", 21, "save")
    _mark(logs, "7", 21, "train")
    assert w.check() is None
    assert len(said) == 1 and "is kept: replacing it would end the run" in said[0], said


@pytest.mark.parametrize("ratio,run", [(0.0, _run()), (1.5, None)])
def test_no_watch_when_replacing_or_recovery_is_off(tmp_path: Path, ratio: float, run: Run | None) -> None:
    assert replacer_of(ratio, str(tmp_path), "7", run, 0, print) is None


def test_a_replacer_looks_every_heartbeat_and_none_bounds_nothing(tmp_path: Path) -> None:
    w = replacer_of(1.5, str(tmp_path), "7", _run(), 0, print)
    assert poll_s(w) == 5.0 and poll_s(None) == float("inf")
