"""Flight-recorder dumps kept node-local above the site's ``logs.debug_max_nodes``, and the copy back
of the ranks a verdict names (:mod:`clusterkit.supervise.frback`): bounded, never through a link,
never a path a node's file names, one step with one task per node."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from clusterkit.supervise import frback, recovery, replan

JOB, RESTART = "4242", 1
STEM = f"clusterkit-fr-{JOB}.r{RESTART}.rank"


def _dirs(tmp_path: Path) -> tuple[Path, Path]:
    node, logs = tmp_path / "node", tmp_path / "run" / "logs"
    node.mkdir()
    logs.mkdir(parents=True)
    return node, logs


def _node_side(node: Path, logs: Path, *targets: str, job: str = JOB) -> None:
    assert frback.main(["--from", str(node), "--logs", str(logs), "--job", job, "--restart", str(RESTART),
                        "--all", *targets]) == 0


def test_only_the_named_ranks_are_copied_under_doctor_s_name(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    node, logs = _dirs(tmp_path)
    for rank in range(4):
        (node / f"{STEM}{rank}").write_bytes(b"dump of rank %d" % rank)
    _node_side(node, logs, "2@n1", "5@n1")
    assert sorted(p.name for p in logs.iterdir()) == [f"fr-{JOB}.r{RESTART}.rank2"]
    assert (logs / f"fr-{JOB}.r{RESTART}.rank2").read_bytes() == b"dump of rank 2"
    said = capsys.readouterr().out.splitlines()
    assert said[0].endswith(f": copied to fr-{JOB}.r{RESTART}.rank2 (14 bytes)"), said
    assert said[1].endswith(": dump: none there"), said


def test_a_link_a_fifo_or_an_oversized_dump_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    node, logs = _dirs(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("not a dump")
    (node / f"{STEM}0").symlink_to(secret)
    os.mkfifo(node / f"{STEM}1")       # opened without blocking: no writer, no wait
    (node / f"{STEM}2").write_bytes(b"x" * 101)
    monkeypatch.setattr(frback, "MAX_BYTES", 100)
    _node_side(node, logs, "0@n1", "1@n1", "2@n1")
    assert list(logs.iterdir()) == []
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith("rank 0 on ") and ": dump: cannot open it: " in said[0], said   # O_NOFOLLOW
    assert said[1].endswith(": dump: not a regular file: left alone"), said
    assert said[2].endswith(": dump: larger than 0 MiB: left on the node"), said


def test_a_link_in_the_logs_is_replaced_not_written_through(tmp_path: Path) -> None:
    node, logs = _dirs(tmp_path)
    target = tmp_path / "elsewhere"
    target.write_text("keep me")
    (logs / f"fr-{JOB}.r{RESTART}.rank3").symlink_to(target)
    (node / f"{STEM}3").write_bytes(b"dump")
    _node_side(node, logs, "3@n1")
    copied = logs / f"fr-{JOB}.r{RESTART}.rank3"
    assert not copied.is_symlink() and copied.read_bytes() == b"dump" and target.read_text() == "keep me"


def test_names_come_from_the_job_and_rank_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node, logs = _dirs(tmp_path)
    (node / f"{STEM}1").write_bytes(b"dump")
    _node_side(node, logs, "../1@n1", "1@../../x", "1@n1;rm", job="../4242")
    assert list(logs.iterdir()) == [] and "not a job id" in capsys.readouterr().out
    _node_side(node, logs, "../1@n1", "1@n1;rm", "1@" + "n" * 65)
    assert list(logs.iterdir()) == []


def test_at_most_max_ranks_and_only_this_node_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node, logs = _dirs(tmp_path)
    for rank in range(frback.MAX_RANKS + 4):
        (node / f"{STEM}{rank}").write_bytes(b"d")
    _node_side(node, logs, *(f"{r}@n1" for r in range(frback.MAX_RANKS + 4)))
    assert len(list(logs.iterdir())) == frback.MAX_RANKS
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv("SLURMD_NODENAME", "n2")
    assert frback.main(["--from", str(node), "--logs", str(other), "--job", JOB, "--restart", str(RESTART),
                        "0@n1", "1@n2"]) == 0
    assert [p.name for p in other.iterdir()] == [f"fr-{JOB}.r{RESTART}.rank1"]


@pytest.mark.parametrize(("value", "folder"), [
    (f"/local/scratch/{STEM}", "/local/scratch"),
    (f"/tmp/{STEM}", "/tmp"),
    (f"/run/x/logs/fr-{JOB}.r{RESTART}.rank", None),     # below the limit: already in the run's logs
    (f"/tmp/clusterkit-fr-{JOB}.r0.rank", None),          # another restart's
    (f"/tmp/../etc/{STEM}", None),
    (f"tmp/{STEM}", None),
    ("", None),
])
def test_the_node_local_folder_is_the_job_s_own_name_or_none(value: str, folder: str | None) -> None:
    assert frback.local_dir({"TORCH_FR_DUMP_TEMP_FILE": value}, JOB, RESTART) == folder
    assert frback.local_dir({"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": value}, JOB, RESTART) == folder


def _fake_srun(tmp_path: Path) -> Path:
    """``srun`` standing in for Slurm on one node: records its words, runs the node side as that node."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(
        "#!/bin/bash\nprintf '%s\\n' \"$@\" > \"$SRUN_WORDS\"\n"
        "while [ \"${1#-}\" != \"$1\" ]; do case $1 in --nodelist) SLURMD_NODENAME=$2; shift;; "
        "--nodes|--ntasks|--ntasks-per-node|--cpus-per-task|--job-name) shift;; esac; shift; done\n"
        "export SLURMD_NODENAME; exec \"$@\"\n")
    (bin_dir / "srun").chmod(0o755)
    return bin_dir


def _recovery_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> recovery.Run:
    """An attempt on n1 and n2 whose copy-back step goes through the recording srun, with ``env``."""
    monkeypatch.setenv("PATH", f"{_fake_srun(tmp_path)}:{os.environ['PATH']}")
    monkeypatch.setenv("SRUN_WORDS", str(tmp_path / "words"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return recovery.Run(JOB, str(tmp_path / "run"), RESTART, ("n1", "n2"), ("n1", "n2"), (), 1)


def test_recovery_copies_the_verdict_s_rank_through_one_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node, logs = _dirs(tmp_path)
    for rank in range(8):
        (node / f"{STEM}{rank}").write_bytes(b"dump %d" % rank)
    run = _recovery_run(tmp_path, monkeypatch, TORCH_FR_DUMP_TEMP_FILE=f"{node}/{STEM}")
    said: list[str] = []
    recovery.copy_dumps(run, replan.Verdict("nccl-timeout", "rank 5 behind", "n2", 5), said.append)
    assert [p.name for p in logs.iterdir()] == [f"fr-{JOB}.r{RESTART}.rank5"], said
    assert said == [f"copy back: rank 5 on n2: copied to fr-{JOB}.r{RESTART}.rank5 (6 bytes)"]
    words = (tmp_path / "words").read_text().splitlines()
    assert words[:8] == ["--nodes", "1", "--ntasks", "1", "--ntasks-per-node", "1", "--nodelist", "n2"]
    assert "--overlap" in words
    said.clear()
    recovery.copy_dumps(run, replan.Verdict("stall", "ranks behind on several nodes", None, 6), said.append)
    assert said == [f"flight recorder: rank 6's dump stays on its node ({node}): its node is not known"]
    said.clear()
    monkeypatch.setenv("TORCH_FR_DUMP_TEMP_FILE", f"{logs}/fr-{JOB}.r{RESTART}.rank")   # below the limit
    (tmp_path / "words").unlink()
    recovery.copy_dumps(run, replan.Verdict("nccl-timeout", "", "n1", 1), said.append)
    assert said == [] and not (tmp_path / "words").exists()   # no step at all


NCCL = f"clusterkit-nccl-{JOB}.r{RESTART}"


def test_the_node_s_nccl_files_come_back_under_its_slurm_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    node, logs = _dirs(tmp_path)
    monkeypatch.setenv("SLURMD_NODENAME", "gpu007")
    (node / f"{NCCL}.host7.101.log").write_text("NCCL INFO 101\n")
    (node / f"{NCCL}.host7.102.log").write_bytes(b"a" * 50 + b"the end\n")
    (node / f"{NCCL}.host7.103.log").symlink_to(tmp_path / "secret")
    (node / f"{NCCL}.x.y.log").write_text("not a process number")
    (node / f"clusterkit-nccl-{JOB}.r0.host7.104.log").write_text("another restart's")
    monkeypatch.setattr(frback, "MAX_BYTES", 20)
    assert frback.main(["--nccl-from", str(node), "--logs", str(logs), "--job", JOB, "--restart", str(RESTART),
                        "nccl@gpu007", "nccl@gpu008"]) == 0
    assert sorted(p.name for p in logs.iterdir()) == [f"nccl-{JOB}.r{RESTART}.gpu007.101.log",
                                                       f"nccl-{JOB}.r{RESTART}.gpu007.102.log"]
    assert (logs / f"nccl-{JOB}.r{RESTART}.gpu007.102.log").read_bytes() == b"a" * 12 + b"the end\n"  # its end
    said = capsys.readouterr().out
    assert "process 102: copied to " in said and ", its last 0 MiB" in said
    assert "process 103: cannot open it: " in said, said


def test_the_nccl_files_are_capped_in_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node, logs = _dirs(tmp_path)
    for pid in range(frback.MAX_NCCL_FILES + 3):
        (node / f"{NCCL}.h.{1000 + pid}.log").write_text("x")
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    assert frback.main(["--nccl-from", str(node), "--logs", str(logs), "--job", JOB, "--restart", str(RESTART),
                        "nccl@n1"]) == 0
    assert len(list(logs.iterdir())) == frback.MAX_NCCL_FILES


def test_recovery_copies_the_verdict_s_node_s_nccl_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node, logs = _dirs(tmp_path)
    (node / f"{NCCL}.h.77.log").write_text("NCCL WARN x\n")
    run = _recovery_run(tmp_path, monkeypatch, NCCL_DEBUG_FILE=f"{node}/{NCCL}.%h.%p.log")
    said: list[str] = []
    recovery.copy_dumps(run, replan.Verdict("nccl-error", "", "n2", None), said.append)   # a node, no rank
    assert [p.name for p in logs.iterdir()] == [f"nccl-{JOB}.r{RESTART}.n2.77.log"], said
    assert said == [f"copy back: on n2: NCCL file of process 77: copied to nccl-{JOB}.r{RESTART}.n2.77.log (12 bytes)"]
