"""Each rank's own progress file (clusterkit/heartbeat.py writes it, supervise/ranks.py reads and
judges it): the writer's line, the reader's bounds, the rank behind a stall, the stragglers, and
the watcher naming the node behind from the files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clusterkit import heartbeat
from clusterkit.supervise import ranks
from clusterkit.supervise.ranks import RankLine, behind, read_all, read_line, stragglers
from clusterkit.supervise.stall import Limits
from clusterkit.supervise.watch import Watcher, stalled_verdict


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heartbeat, "_last", {"time": 0.0, "phase": None, "path": None})
    monkeypatch.setitem(heartbeat._rank, "path", None)
    monkeypatch.setitem(heartbeat._rank, "pid", os.getpid())   # no heartbeat thread in these tests
    for name in ("CK_PROGRESS_FILE", "RANK", "SLURM_PROCID", "SLURMD_NODENAME"):
        monkeypatch.delenv(name, raising=False)


def _line(rank: int, host: str, step: int = 10, work: float | None = 1.0, wall: float | None = 2.0,
          beat: float = 1.7e9) -> RankLine:
    return RankLine(step, 1.7e9, "train", rank, host, wall, work, beat)


def test_every_rank_writes_its_own_line_with_its_medians(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "9.progress"
    monkeypatch.setenv("CK_PROGRESS_FILE", str(path))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("SLURMD_NODENAME", "node7")
    monkeypatch.setattr(heartbeat, "BEAT_S", 0.0)        # every call writes (the thread's beat, here at once)
    for step in range(1, 8):
        assert heartbeat.progress(step, work_s=0.25 if step != 4 else 9.0) is False   # not rank 0: no main line
    got = read_line(tmp_path / "9.progress.rank3")
    assert got is not None and (got.rank, got.host, got.step, got.phase) == (3, "node7", 7, "train")
    assert got.work_s == 0.25                            # the median of its last steps: one slow step is not it
    assert got.step_s is not None and got.step_s >= 0
    assert not path.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["9.progress.rank3"]


def test_a_median_waits_for_its_first_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CK_PROGRESS_FILE", str(tmp_path / "9.progress"))
    monkeypatch.setattr(heartbeat, "BEAT_S", 0.0)
    heartbeat.progress(1, work_s=0.5)
    got = read_line(tmp_path / "9.progress.rank0")
    assert got is not None and got.work_s is None and got.step_s is None
    assert heartbeat.read(tmp_path / "9.progress") is not None   # rank 0 writes the main line as before


@pytest.mark.parametrize("text", [
    "", "step=1 time=1.0 phase=train", "step=1 time=1.0 phase=train rank=0 host=a b step_s=- work_s=- beat=1.0",
    "step=1 time=1.0 phase=train rank=0 host=n1 step_s=nan work_s=- beat=1.0",
    "step=1 time=1.0 phase=train rank=0 host=n1 step_s=- work_s=- beat=1.0\x1b[2J",
])
def test_the_reader_takes_only_the_format(tmp_path: Path, text: str) -> None:
    (tmp_path / "p").write_text(text)
    assert read_line(tmp_path / "p") is None


def test_the_reader_opens_no_link_or_fifo_and_checks_the_rank_in_the_name(tmp_path: Path) -> None:
    good = "step=4 time=1.0 phase=train rank={} host=n1 step_s=- work_s=0.5 beat={}\n"
    (tmp_path / "5.progress.rank0").write_text(good.format(0, 100.0))
    (tmp_path / "5.progress.rank1").write_text(good.format(2, 100.0))      # says another rank: left out
    (tmp_path / "5.progress.rank3").write_text(good.format(3, 10.0))       # an earlier attempt's: left out
    (tmp_path / "6.progress.rank2").write_text(good.format(2, 100.0))      # another job's
    os.symlink(tmp_path / "5.progress.rank0", tmp_path / "5.progress.rank4")
    os.mkfifo(tmp_path / "5.progress.rank5")
    assert [x.rank for x in read_all(tmp_path, "5")] == [0]


def test_a_frozen_heartbeat_names_its_rank_and_node() -> None:
    seen = [(_line(0, "n1"), 100.0), (_line(1, "n2"), 85.0), (_line(2, "n3"), 99.0)]
    got = behind(seen, now=101.0)
    assert got is not None and got.ranks == (1,) and got.node == "n2" and "heartbeat stopped 16 s ago" in got.why
    assert behind(seen, now=97.0) is None                 # 12 s: within FROZEN_S, and every step alike
    everyone = [(line, 50.0) for line, _ in seen]
    assert behind(everyone, now=101.0) is None            # every beat stopped: the files cannot tell


def test_a_rank_at_a_lower_step_is_behind_and_ranks_on_two_nodes_name_no_one_node() -> None:
    seen = [(_line(0, "n1", step=12), 100.0), (_line(1, "n2", step=11), 100.0), (_line(2, "n3", step=12), 100.0)]
    got = behind(seen, now=101.0)
    assert got is not None and got.node == "n2" and got.why == "at step 11, the others at 12"
    two = [(_line(0, "n1", step=12), 100.0), (_line(1, "n2", step=11), 100.0), (_line(2, "n3", step=11), 100.0)]
    got = behind(two, now=101.0)
    assert got is not None and got.ranks == (1, 2) and got.node is None
    assert "several nodes" in stalled_verdict(_stall(), got).summary and stalled_verdict(_stall(), got).node is None


def _stall():   # type: ignore[no-untyped-def]
    from clusterkit.supervise.stall import Stall
    return Stall(30.0, 20.0, 12, "train")


def test_a_straggler_is_slower_than_the_ratio_times_the_others() -> None:
    lines = [_line(0, "n1", work=1.0), _line(1, "n2", work=1.1), _line(2, "n3", work=1.7), _line(3, "n4", work=0.9)]
    got = stragglers(lines, 1.5)
    assert [(x.rank, x.host, x.measure) for x in got] == [(2, "n3", "work")]
    assert got[0].ratio == pytest.approx(1.7) and "1.7x the others' 1.000 s" in got[0].worded()
    assert stragglers(lines, 1.8) == [] and stragglers(lines, 0) == []


def test_two_ranks_are_judged_each_against_the_other() -> None:
    assert [x.rank for x in stragglers([_line(0, "a", work=1.0), _line(1, "b", work=2.0)], 1.5)] == [1]


def test_without_every_work_time_the_wall_step_time_is_judged_and_a_missing_median_judges_none() -> None:
    lines = [_line(0, "n1", work=None, wall=1.0), _line(1, "n2", work=0.1, wall=3.0), _line(2, "n3", wall=1.1)]
    assert [(x.rank, x.measure) for x in stragglers(lines, 1.5)] == [(1, "step")]
    lines[0] = _line(0, "n1", work=None, wall=None)
    assert stragglers(lines, 1.5) == []


def test_the_watcher_names_the_rank_whose_heartbeat_stopped(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "77.progress.rank2").write_text("step=99 time=1.0 phase=train rank=2 host=old step_s=- work_s=- beat=1.0\n")
    now = [1000.0]
    said: list[str] = []
    w = Watcher(Limits(floor_s=20.0, factor=10.0, warmup_steps=3, save_s=120.0), str(tmp_path), "77", 0, 0,
                said.append, clock=lambda: now[0])

    def beat(rank: int, host: str, step: int) -> None:
        (logs / f"77.progress.rank{rank}").write_text(
            f"step={step} time={now[0]:.3f} phase=train rank={rank} host={host} step_s=1.0 work_s=- "
            f"beat={now[0]:.3f}\n")

    for step in range(1, 8):
        (logs / "77.progress").write_text(f"step={step} time={now[0]:.3f} phase=train\n")
        for r in (0, 1, 2):
            beat(r, f"node{r + 1}", step)
        now[0] += 1.0
        assert w.check() is None
    for _ in range(5):                    # node2's rank 1 stops; the others keep beating, waiting
        now[0] += 5.0
        beat(0, "node1", 7)
        beat(2, "node3", 7)
        found = w.check()
    assert found is not None and w.behind is not None and w.behind.node == "node2" and w.behind.ranks == (1,)
    v = stalled_verdict(found, w.behind)
    assert v.node == "node2" and "node behind: node2 (rank 1: its heartbeat stopped" in v.summary
    assert any("looking for the rank behind" in s for s in said) or found.quiet_s > 20


def test_progress_never_raises_on_a_bad_work_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CK_PROGRESS_FILE", str(tmp_path / "p"))
    assert heartbeat.progress(1, work_s="slow") is False          # type: ignore[arg-type]
    assert heartbeat.progress(2, work_s=float("nan")) is True      # rank 0's line; the odd time left out
    assert ranks.read_line(tmp_path / "p.rank0") is not None


def test_a_rank_outside_any_collective_while_the_others_wait_is_behind() -> None:
    def at(rank: int, host: str, where: str, coll: bool) -> tuple[RankLine, float]:
        return RankLine(10, 1.0, "train", rank, host, 1.0, None, 1.0, where, coll), 100.0

    seen = [at(0, "n1", "distributed_c10d.py:wait", True), at(1, "n2", "loader.py:next_batch", False),
            at(2, "n3", "distributed_c10d.py:wait", True)]
    got = behind(seen, now=101.0)
    assert got is not None and got.node == "n2" and "outside any collective (in loader.py:next_batch)" in got.why
    # no rank in torch.distributed (DDP waits inside autograd): the one apart from most ranks
    seen = [at(0, "n1", "_tensor.py:backward", False), at(1, "n2", "loader.py:next_batch", False),
            at(2, "n3", "_tensor.py:backward", False)]
    got = behind(seen, now=101.0)
    assert got is not None and got.node == "n2" and "while the others are in _tensor.py:backward" in got.why
    # ranks waiting in a collective may show the step before the one the rank outside reported: the
    # collective tells (seen under load: rank 1 stuck before its next all-reduce, rank 0 at step 96)
    def stepped(rank: int, step: int, coll: bool) -> tuple[RankLine, float]:
        where = "distributed_c10d.py:all_reduce" if coll else "hang_job.py:main"
        return RankLine(step, 1.0, "train", rank, f"n{rank + 1}", 1.0, None, 1.0, where, coll), 100.0

    got = behind([stepped(0, 96, True), stepped(1, 97, False), stepped(2, 97, True)], now=101.0)
    assert got is not None and got.ranks == (1,) and got.why.startswith("outside any collective"), got
    got = behind([stepped(0, 96, True), stepped(1, 97, True), stepped(2, 97, True)], now=101.0)
    assert got is not None and got.ranks == (0,) and got.why == "at step 96, the others at 97"   # all waiting
    two = [at(0, "n1", "a.py:f", False), at(1, "n2", "b.py:g", False)]
    assert behind(two, now=101.0) is None                 # no majority: no name
    old = [(RankLine(10, 1.0, "train", r, f"n{r}", 1.0, None, 1.0), 100.0) for r in range(3)]
    assert behind(old, now=101.0) is None                 # a writer without the fields: nothing to go on


def test_where_samples_the_training_thread_and_sees_a_collective(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setenv("CK_PROGRESS_FILE", str(tmp_path / "9.progress"))
    heartbeat.progress(1)
    assert heartbeat.where()[0].startswith("test_ranks.py:") or heartbeat.where()[0] == "-"
    box: dict[str, tuple[str, int]] = {}
    inside = threading.Event()
    release = threading.Event()

    def sample() -> None:
        inside.wait()
        box["at"] = heartbeat.where()
        release.set()

    t = threading.Thread(target=sample)
    t.start()
    heartbeat._rank["thread"] = threading.get_ident()
    fake = tmp_path / "torch" / "distributed" / "distributed_c10d.py"   # a module at a collective's path
    fake.parent.mkdir(parents=True)
    fake.write_text("def wait(inside, release):\n    inside.set()\n    release.wait()\n")
    code = compile(fake.read_text(), str(fake), "exec")
    space: dict[str, object] = {}
    exec(code, space)
    space["wait"](inside, release)   # type: ignore[operator]
    t.join()
    assert box["at"] == ("threading.py:wait", 1), box   # the innermost frame; a collective below it
