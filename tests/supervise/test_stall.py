"""The stall rule (supervise/stall.py), its watcher (supervise/watch.py) and the supervisor's flags."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.supervise import replan
from clusterkit.supervise.__main__ import parse
from clusterkit.supervise.ranks import Behind
from clusterkit.supervise.stall import Limits, Seen, Stall, limit_s, median_step_s, verdict
from clusterkit.supervise.watch import Watcher, end_step, stalled_verdict

L = Limits(floor_s=20.0, factor=10.0, warmup_steps=3, save_s=120.0)
ENV = {"CK_RUN_DIR": "/r", "CK_JOB_ID": "77"}


def _lines(times: list[float], phase: str = "train", first: int = 0) -> list[Seen]:
    return [Seen(first + i, phase, t) for i, t in enumerate(times)]


def test_a_stall_is_no_progress_past_the_floor_after_warm_up() -> None:
    seen = _lines([0.0, 1.0, 2.0, 3.0, 4.0])          # 1 s a step: 10 steps is 10 s, the floor wins
    assert limit_s(seen, L) == 20.0
    assert verdict(seen, 24.0, L, reporting=True, started=0.0) is None
    got = verdict(seen, 24.5, L, reporting=True, started=0.0)
    assert got == Stall(20.5, 20.0, 4, "train")
    assert got.worded() == "no progress since step 4 for 20 s, past the limit of 20 s"


def test_slow_steps_raise_the_limit_to_k_median_steps() -> None:
    seen = _lines([0.0, 5.0, 10.0, 15.0])              # 5 s a step: 50 s
    assert median_step_s(seen) == 5.0
    assert verdict(seen, 15.0 + 49.0, L, reporting=True, started=0.0) is None
    assert verdict(seen, 15.0 + 51.0, L, reporting=True, started=0.0) is not None


def test_warm_up_steps_are_not_judged() -> None:
    seen = _lines([0.0, 1.0, 2.0])                     # 2 steps seen, 3 of warm-up
    assert verdict(seen, 10_000.0, L, reporting=True, started=0.0) is None
    assert verdict([], 10_000.0, L, reporting=True, started=0.0) is None   # reporting, nothing this attempt
    assert verdict(_lines([0.0, 1.0, 2.0, 3.0]), 10_000.0, L, reporting=True, started=0.0) is not None


def test_a_resumed_count_is_judged_from_where_it_starts() -> None:
    seen = _lines([100.0, 101.0, 102.0, 103.0], first=40)
    assert verdict(seen, 122.0, L, reporting=True, started=100.0) is None
    assert verdict(seen, 124.0, L, reporting=True, started=100.0) is not None


def test_a_save_has_its_own_longer_limit_and_is_a_stall_past_it() -> None:
    seen = [*_lines([0.0, 1.0, 2.0, 3.0]), Seen(3, "save", 3.5)]
    assert verdict(seen, 3.5 + 119.0, L, reporting=True, started=0.0) is None
    got = verdict(seen, 3.5 + 121.0, L, reporting=True, started=0.0)
    assert got is not None and got.phase == "save" and got.limit_s == 120.0
    assert "checkpoint save at step 3" in got.worded()


def test_a_save_is_not_a_step_for_the_median() -> None:
    seen = [*_lines([0.0, 1.0, 2.0, 3.0]), Seen(3, "save", 3.5), Seen(4, "train", 300.0), Seen(5, "train", 301.0)]
    assert median_step_s(seen) == 1.0


def test_without_a_progress_file_the_newest_log_write_stands_in_with_the_save_limit() -> None:
    assert verdict([], 100.0, L, reporting=False, started=0.0, logs_at=None) is None
    assert verdict([], 130.0, L, reporting=False, started=0.0, logs_at=50.0) is None
    got = verdict([], 171.0, L, reporting=False, started=0.0, logs_at=50.0)
    assert got is not None and got.phase == "logs" and got.limit_s == 120.0 and got.step is None
    assert "the newest log write stands in" in got.worded()


def test_a_floor_of_zero_turns_watching_off() -> None:
    off = Limits(floor_s=0.0)
    assert verdict(_lines([0.0, 1.0, 2.0, 3.0, 4.0]), 1e9, off, reporting=True, started=0.0) is None
    assert verdict([], 1e9, off, reporting=False, started=0.0) is None


def _healthy_run(mark_save: bool, seed: int) -> tuple[list[tuple[float, Seen]], float]:
    """A run's progress lines as the supervisor sees them: step times 1 to 5 s (fivefold), a
    line at most every 5 s (clusterkit.progress), a 60 s save at step 40 (longer than ten
    steps), polled every 2 s; (poll time, newest line) pairs and the end."""
    rng = random.Random(seed)
    t, last_write, lines = 0.0, -1e9, []
    for step in range(100):
        t += rng.uniform(1.0, 5.0)
        if t - last_write >= 5.0:
            lines.append(Seen(step, "train", t))
            last_write = t
        if step == 40:
            if mark_save:
                lines.append(Seen(step, "save", t))
            t += 60.0
            lines.append(Seen(step, "train", t))
            last_write = t
    return [(at.at, at) for at in lines], t


@pytest.mark.parametrize("seed", range(5))
def test_no_false_alarm_with_fivefold_step_times_and_a_save_longer_than_ten_steps(seed: int) -> None:
    lines, end = _healthy_run(mark_save=True, seed=seed)
    limits = Limits(floor_s=20.0, factor=10.0, warmup_steps=3, save_s=120.0)
    now, seen = 0.0, []
    while now <= end:
        while lines and lines[0][0] <= now:
            seen.append(Seen(lines[0][1].step, lines[0][1].phase, now))   # first seen at this poll
            lines.pop(0)
        assert verdict(seen, now, limits, reporting=True, started=0.0) is None, (seed, now, seen[-3:])
        now += 2.0


def test_the_same_save_unmarked_is_a_stall_at_a_short_floor() -> None:
    """The test above can fail: the same 60 s save, not marked as one, is a stall under a
    floor shorter than it."""
    lines, end = _healthy_run(mark_save=False, seed=0)
    limits = Limits(floor_s=20.0, factor=5.0, warmup_steps=3, save_s=120.0)
    now, seen, found = 0.0, [], []
    while now <= end:
        while lines and lines[0][0] <= now:
            seen.append(Seen(lines[0][1].step, lines[0][1].phase, now))
            lines.pop(0)
        if (v := verdict(seen, now, limits, reporting=True, started=0.0)) is not None:
            found.append(v)
        now += 2.0
    # one stall: in the save after step 40 (the last line written before it, at most 5 s earlier)
    assert found and len({v.step for v in found}) == 1 and 35 <= found[0].step <= 40, found
    assert all(v.phase == "train" for v in found)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _write(path: Path, step: int, phase: str = "train", when: float = 1.7e9) -> None:
    path.write_text(f"step={step} time={when + step:.3f} phase={phase}\n")


def test_the_watcher_reads_the_progress_file_and_finds_the_stall(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    progress, said, clock = tmp_path / "logs" / "77.progress", [], Clock()
    _write(progress, 90)                               # an earlier attempt's line: not this one's progress
    w = Watcher(L, str(tmp_path), "77", 0, 1, said.append, clock=clock)
    assert w.poll_s == 4.0
    for step in range(12, 17):                         # resumed at 12: the count went back, counted from there
        _write(progress, step)
        clock.now += 1.0
        assert w.check() is None
    assert [s.step for s in w.seen] == [12, 13, 14, 15, 16]
    clock.now += 20.5
    found = w.check()                                  # no rank writes a file of its own: no wait for a name
    assert found is not None and found.step == 16 and found.phase == "train" and w.behind is None
    assert w.check() is None                           # found once
    v = stalled_verdict(found)
    assert v.category == "stall" and v.node is None and "node behind: unknown" in v.summary
    step = replan.next_step(v, [], replan.Attempted(0, ("n1", "n2"), ("n3",), max_relaunches=3))
    assert isinstance(step, replan.Relaunch) and step.nodes == ("n1", "n2") and not step.once
    behind = Behind((1,), ("n2",), "its heartbeat stopped 14 s ago while the other ranks' went on")
    assert stalled_verdict(found, behind).rank == 1
    named = replan.next_step(stalled_verdict(found, behind), [], replan.Attempted(0, ("n1", "n2"), ("n3",), 3))
    assert isinstance(named, replan.Relaunch) and named.nodes == ("n1", "n3") and named.dropped[0][0] == "n2"


def _mark(progress: Path, step: int, phase: str = "train", when: float = 1.7e9) -> None:
    _write(progress, step, phase, when)
    with open(f"{progress}.log", "a") as log:   # as heartbeat.progress marks a first line and a phase change
        log.write(progress.read_text())


def test_a_stall_soon_after_warm_up_is_found_when_the_watcher_first_saw_a_later_step(tmp_path: Path) -> None:
    # rank 0 saves every 3 steps (two lines each) and its link drops at step 9, before the
    # watcher's first look: all it ever sees is step 9; the progress log says the attempt began at 0
    (tmp_path / "logs").mkdir()
    progress, said, clock = tmp_path / "logs" / "77.progress", [], Clock()
    limits = Limits(floor_s=15.0, warmup_steps=2)
    w = Watcher(limits, str(tmp_path), "77", 0, 0, said.append, clock=clock)
    _mark(progress, 0)
    for step in (3, 6, 9):
        _mark(progress, step, "save")
        _mark(progress, step)
    assert w.check() is None
    assert [s.step for s in w.seen] == [9]
    clock.now += 15.5
    found = w.check()
    assert found is not None and found.step == 9 and found.limit_s == 15.0


def test_the_attempts_first_step_comes_from_its_own_marks_and_again_after_a_resume(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    progress, said, clock = tmp_path / "logs" / "77.progress", [], Clock()
    _mark(progress, 0)                                 # an earlier attempt's mark: not where this one began
    limits = Limits(floor_s=15.0, warmup_steps=3)
    w = Watcher(limits, str(tmp_path), "77", 0, 1, said.append, clock=clock)
    _mark(progress, 12)                                # this attempt resumed at 12
    _write(progress, 13)
    assert w.check() is None and w.first == 12
    clock.now += 100.0
    assert w.check() is None                           # one step past 12: warming up
    _write(progress, 16)
    assert w.check() is None
    clock.now += 334.0                                 # 100 s for 3 steps: ten of them
    found = w.check()
    assert found is not None and found.limit_s == pytest.approx(1000 / 3)
    w = Watcher(limits, str(tmp_path), "77", 0, 2, said.append, clock=clock)
    _write(progress, 20)
    assert w.check() is None and w.first is None       # no mark of this attempt: its first line seen stands in
    _mark(progress, 9)                                 # its process started again at 9 (the count went back)
    _write(progress, 10)
    assert w.check() is None and w.first == 9 and [s.step for s in w.seen] == [10]
    _write(progress, 12)                               # 3 steps past 9 (2 past the first line seen)
    assert w.check() is None
    clock.now += 15.5
    found = w.check()
    assert found is not None and found.step == 12


def test_the_watcher_falls_back_to_the_rank_logs_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    rank_log = tmp_path / "logs" / "77.r0.node1.out"
    rank_log.write_text("step 1\n")
    said, clock = [], Clock()
    w = Watcher(Limits(floor_s=20.0, save_s=30.0), str(tmp_path), "77", 0, 0, said.append, clock=clock)
    assert w.check() is None and said == []          # not yet: the job may not have written its first line
    clock.now += 21.0
    assert w.check() is None
    assert len(said) == 1 and "no progress file (77.progress) yet after 20 s: until there is one" in said[0]
    old = os.stat(rank_log).st_mtime - 100
    os.utime(rank_log, (old, old))                     # the newest write: 100 s ago
    clock.now += 10.0
    found = w.check()
    assert found is not None and found.phase == "logs"
    assert len(said) == 1


def test_end_step_ends_a_launcher_that_ignores_nothing() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert end_step(proc, print) == 128 + 15


def test_the_supervisor_flags_become_limits() -> None:
    spec = parse(["--mode", "step", "--stall-floor-s", "15", "--stall-factor", "8", "--warmup-steps", "2",
                  "--save-limit-s", "90", "--", "srun"], ENV)
    assert spec.watch == Limits(15.0, 8.0, 2, 90.0)
    assert parse(["--mode", "step", "--", "srun"], ENV).watch is None
    assert parse(["--mode", "step", "--stall-floor-s", "0", "--", "srun"], ENV).watch is None


@pytest.mark.parametrize("flag,value", [("--stall-floor-s", "-1"), ("--stall-factor", "0.5"),
                                        ("--warmup-steps", "-2"), ("--save-limit-s", "nan"),
                                        ("--stall-floor-s", "inf")])
def test_a_wrong_watch_flag_is_a_usage_error(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        parse(["--mode", "step", flag, value, "--", "srun"], ENV)
    assert ended.value.code == 2
    assert flag in capsys.readouterr().err
