"""``clusterkit.progress(step)``: the training script's side and the reader's (clusterkit/heartbeat.py),
then end to end on the local site: a real torchrun job reports, ``status`` shows rank 0's newest line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit import heartbeat
from tests.conftest import CLI, REPO


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heartbeat, "_last", {"time": 0.0, "phase": None, "path": None})
    monkeypatch.setitem(heartbeat._rank, "path", None)
    monkeypatch.setitem(heartbeat._rank, "pid", os.getpid())   # no heartbeat thread in these tests
    for name in ("CK_PROGRESS_FILE", "RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)


def test_outside_a_job_it_does_nothing(tmp_path: Path) -> None:
    assert heartbeat.progress(3) is False
    assert list(tmp_path.iterdir()) == []


def test_rank0_writes_the_line_every_rank_its_own_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "job.progress"
    monkeypatch.setenv("CK_PROGRESS_FILE", str(path))
    monkeypatch.setenv("RANK", "1")
    assert heartbeat.progress(7) is False and not path.exists()
    monkeypatch.setenv("RANK", "0")
    assert heartbeat.progress(7) is True
    got = heartbeat.read(path)
    assert got is not None and got.step == 7 and got.phase == "train"
    # no temporary file left; each rank's own file beside it (tests/supervise/test_ranks.py), and the
    # first line is a mark in the progress log
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.progress", "job.progress.log",
                                                          "job.progress.rank0", "job.progress.rank1"]


def test_writes_are_spaced_but_a_save_is_said_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p"
    monkeypatch.setenv("CK_PROGRESS_FILE", str(path))
    assert heartbeat.progress(1) is True
    assert heartbeat.progress(2) is False                       # within MIN_INTERVAL_S: skipped
    assert heartbeat.progress(2, saving=True) is True            # the phase changed
    assert heartbeat.read(path).phase == "save"                  # type: ignore[union-attr]
    assert heartbeat.progress(3) is True                         # the save ended
    assert heartbeat.read(path).step == 3                        # type: ignore[union-attr]
    assert heartbeat.progress(4, min_interval_s=0) is True


def test_it_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CK_PROGRESS_FILE", str(tmp_path / "missing-dir" / "p"))
    assert heartbeat.progress(1) is False
    monkeypatch.setenv("CK_PROGRESS_FILE", str(tmp_path / "p"))
    assert heartbeat.progress("not a step") is False             # type: ignore[arg-type]
    assert heartbeat.progress(-1) is False


def test_it_writes_through_no_planted_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    path = tmp_path / "p"
    (tmp_path / f"p.{os.getpid()}.tmp").symlink_to(victim)      # the temporary name, planted
    monkeypatch.setenv("CK_PROGRESS_FILE", str(path))
    assert heartbeat.progress(1) is False
    assert victim.read_text() == "keep\n"


@pytest.mark.parametrize("text", [
    "", "step=1\n", "step=1 time=x phase=train\n", "step=1 time=1.0 phase=sleep\n",
    "step=99999999999999999 time=1.0 phase=train\n", "step=1 time=1.0 phase=train\x1b[2J\n",
    "step=1 time=1.0 phase=train\n" + "A" * 4096,
])
def test_the_reader_takes_only_the_format(tmp_path: Path, text: str) -> None:
    path = tmp_path / "p"
    path.write_text(text)
    assert heartbeat.read(path) is None


def test_the_reader_opens_no_link_or_fifo(tmp_path: Path) -> None:
    target = tmp_path / "t"
    target.write_text("step=1 time=1.0 phase=train\n")
    (tmp_path / "link").symlink_to(target)
    os.mkfifo(tmp_path / "fifo")
    assert heartbeat.read(tmp_path / "link") is None
    assert heartbeat.read(tmp_path / "fifo") is None               # returns at once: no writer needed
    assert heartbeat.read(target) == heartbeat.Progress(1, 1.0, "train")


def test_import_is_light() -> None:
    heavy = "('pydantic', 'yaml', 'jinja2', 'click', 'submitit', 'paramiko', 'torch')"
    code = ("import sys, clusterkit; clusterkit.progress; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO / "toolkit")})
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.torch
def test_a_local_job_reports_and_status_shows_rank0(ck: CLI, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the job is a torchrun job (pip install torch, CPU build)")
    run = tmp_path / "run"
    res = ck.proc("submit", "--site", "local", "--out", str(run), "--wait", "--", "python",
                  str(REPO / "tests" / "progress" / "progress_job.py"),
                  env={"CLUSTERKIT_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO / "toolkit")})
    assert res.code == 0, res.out + res.err
    st = ck.proc("status", "--json", env={"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")})
    doc = json.loads(st.out)
    # rank 0's newest line: the report after the save (step 6, a phase change is written at
    # once) or a later step, where more than MIN_INTERVAL_S passed; never rank 1's (1000 up)
    step = doc["progress"]["step"]
    assert 6 <= step <= 10 and doc["progress"]["phase"] == "train", doc
    text = ck.proc("status", env={"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")})
    assert f"  progress: step {step}, " in text.out, text.out
    assert any((run / "logs").glob("*.progress"))


def _cgroup_cpu_limit() -> str | None:
    """Why this machine cannot limit one process's CPU (None: it can): root and a writable cgroup."""
    for root, knob in ((Path("/sys/fs/cgroup/cpu"), "cpu.cfs_quota_us"), (Path("/sys/fs/cgroup/unified"), "cpu.max"),
                       (Path("/sys/fs/cgroup"), "cpu.max")):
        probe = root / f"clusterkit-probe-{os.getpid()}"
        try:
            probe.mkdir()
        except OSError:
            continue
        try:
            if (probe / knob).exists():
                return None
        finally:
            probe.rmdir()
    return "no writable cgroup with a CPU limit here (root and cgroup v1 cpu or v2 cpu.max are needed)"


@pytest.mark.torch
@pytest.mark.parametrize(("how", "ratio"), [("sleep", "2.5"), ("cpu=10", "2")])
def test_a_slow_rank_is_named_a_straggler_in_status(ck: CLI, tmp_path: Path, how: str, ratio: str) -> None:
    """End to end on the local site: a torchrun job whose rank 1 is slowed, by a sleep four times
    as long as the others' per step, or by a real CPU limit of 10 % of one CPU (a cgroup; skipped
    where none can be made); ``status`` names its node (this machine) and rank from the ranks' own
    files, at the ratio ``--set straggler_ratio`` gave; rank 0 is not named."""
    pytest.importorskip("torch", reason="the job is a torchrun job (pip install torch, CPU build)")
    if how.startswith("cpu=") and (why := _cgroup_cpu_limit()):
        pytest.skip(why)
    env = {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO / "toolkit")}
    res = ck.proc("submit", "--site", "local", "--out", str(tmp_path / "run"), "--set", f"straggler_ratio={ratio}",
                  "--wait", "--", "python", str(REPO / "tests" / "progress" / "straggler_job.py"), "1", how, env=env)
    assert res.code == 0, res.out + res.err
    doc = json.loads(ck.proc("status", "--json", env=env).out)
    assert doc["straggler_ratio"] == float(ratio) and doc["ranks_reporting"] >= 2, doc
    assert doc["progress"]["step"] == 30, doc   # the last step, written at exit (a run may be shorter than 5 s)
    [slow] = doc["stragglers"]
    assert slow["rank"] == 1 and slow["node"] == os.uname().nodename and slow["measure"] == "work", slow
    assert float(ratio) < slow["ratio"] < 20, slow
    text = ck.proc("status", env=env).out
    assert f"  straggler: {os.uname().nodename} (rank 1: " in text and "x the others' " in text, text


def test_the_log_keeps_the_first_line_and_each_change_of_phase(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p"
    monkeypatch.setenv("CK_PROGRESS_FILE", str(path))
    for step, saving in ((1, False), (2, False), (3, False), (3, True), (3, False), (4, False)):
        heartbeat.progress(step, saving=saving, min_interval_s=0)
    marks = heartbeat.read_log(f"{path}.log")
    assert [(m.step, m.phase) for m in marks] == [(1, "train"), (3, "save"), (3, "train")]
    (tmp_path / "p.log").write_text("step=1 time=5 phase=train\n<script>\nstep=x\nstep=2 time=6 phase=save\n")
    assert [(m.step, m.time) for m in heartbeat.read_log(f"{path}.log")] == [(1, 5.0), (2, 6.0)]


def test_the_log_stops_growing_at_its_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p"
    monkeypatch.setenv("CK_PROGRESS_FILE", str(path))
    monkeypatch.setattr(heartbeat, "MAX_LOG_BYTES", 100)
    for step in range(1, 20):
        heartbeat.progress(step, saving=step % 2 == 0, min_interval_s=0)
    assert 0 < (tmp_path / "p.log").stat().st_size <= 100
    assert heartbeat.read(path) is not None and heartbeat.read(path).step == 19   # the file itself goes on
