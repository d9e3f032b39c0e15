"""What the preemption path refuses at plan time, and what the rendered script gives the ranks.

Refused before anything is queued: a grace time that does not fit before the time limit, a
time limit too short for the warning, and requeue for launchers whose workers run outside
Slurm's job steps (the warning could not reach them).  The runs themselves are proven on the
Slurm testbed (tests/slurm/test_preemption.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterkit.vocab import slurm_seconds
from tests.conftest import REPO, assert_one_line_error, shared_site


def _site(tmp_path: Path, scheduler: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\nscheduler: {{{scheduler}}}\n")
    return str(path)


def test_grace_must_be_shorter_than_the_warning(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, "grace_s: 60, preempt_signal_s: 60")
    result = ck("sites", "validate", site)
    assert_one_line_error(result, 2, "s.yaml:3: scheduler.grace_s: grace_s 60 must be less than preempt_signal_s 60")


def test_default_grace_is_checked_against_a_short_warning(ck, tmp_path: Path) -> None:
    path = tmp_path / "short.yaml"
    path.write_text("name: short\nscheduler: {kind: slurm, preempt_signal_s: 30}\n"
                    "nodes: {nodelist: 'n[1-2]', gpus_per_node: 1}\n")
    result = ck("sites", "validate", str(path))
    assert_one_line_error(result, 2, "short.yaml:2: scheduler: grace_s 60 must be less than preempt_signal_s 30")


@pytest.mark.parametrize("time", ["00:02:00", "1:30", "0-00:02"])
def test_time_limit_without_room_for_the_warning_is_refused(ck, tmp_path: Path, time: str) -> None:
    result = ck("render", "--site", "testbed", "--stage", "multi-node", "--set", f"time={time}",
                "--out", str(tmp_path / "run"), "--", "python", "train.py")
    assert_one_line_error(result, 2, f"time limit {time} leaves no room for the time-limit warning",
                          "preempt_signal_s 60 s + 60 s")
    assert not (tmp_path / "run").exists()


def test_time_limit_just_long_enough_renders(ck, tmp_path: Path) -> None:
    result = ck("render", "--site", "testbed", "--stage", "multi-node", "--set", "time=2:01",
                "--out", str(tmp_path / "run"), "--", "python", "train.py")
    assert result.code == 0, result.err


def test_without_restarts_a_short_job_has_no_warning_so_no_floor(ck, tmp_path: Path) -> None:
    """Every Slurm stage requeues (single-node too), so the floor holds there; max_restarts=0 lifts it."""
    refused = ck("render", "--site", "testbed", "--stage", "single-node", "--set", "time=00:01:00",
                 "--out", str(tmp_path / "run"), "--", "python", "train.py")
    assert_one_line_error(refused, 2, "time limit 00:01:00 leaves no room", "or --set max_restarts=0")
    result = ck("render", "--site", "testbed", "--stage", "single-node", "--set", "time=00:01:00",
                "--set", "max_restarts=0", "--out", str(tmp_path / "run"), "--", "python", "train.py")
    assert result.code == 0, result.err
    script = (tmp_path / "run" / "job.sbatch").read_text()
    assert "#SBATCH --signal" not in script and "#SBATCH --no-requeue" in script


@pytest.mark.parametrize("launcher, extra", [("horovod", []), ("colossalai", []),
                                             ("deepspeed", ["--set", "ds_launcher=pdsh"])])
def test_requeue_refused_where_the_warning_cannot_reach_every_rank(ck, tmp_path: Path, launcher: str,
                                                                   extra: list[str]) -> None:
    args = ["render", "--site", "testbed", "--stage", "multi-node", "--launcher", launcher, *extra,
            "--out", str(tmp_path / "run"), "--", "python", "train.py"]
    result = ck(*args)
    assert_one_line_error(result, 2, f"{launcher}", "outside Slurm's job steps", "--set max_restarts=0")
    ok = ck(*args[:-3], "--set", "max_restarts=0", *args[-3:])
    assert ok.code == 0, ok.err
    assert "#SBATCH --no-requeue" in (tmp_path / "run" / "job.sbatch").read_text()


def test_checkpoint_dir_is_on_shared_checkpoint_storage(ck, tmp_path: Path) -> None:
    site = shared_site(tmp_path / "sites", "ib-h100", tmp_path)   # the run directory, on "shared" tmp
    result = ck("render", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--job-name", "llm",
                "--out", str(tmp_path / "run"), "--", "python", "train.py")
    assert result.code == 0, result.err
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert plan["checkpoint_dir"] == "/lustre/scratch/checkpoints" and plan["grace_s"] == 60
    script = (tmp_path / "run" / "job.sbatch").read_text()
    # no --run-name: the run is the job name and its first job id, so unrelated runs never share one
    assert 'export CK_RUN_NAME=llm-"$CK_JOB_ID"' in script
    assert ('ck_checkpoints=/lustre/scratch/checkpoints\n'
            'export CK_CHECKPOINT_DIR="$ck_checkpoints/$ck_user/$CK_RUN_NAME"') in script   # the user's own folder
    assert 'export CK_RESTART_COUNT="$ck_restarts"' in script


@pytest.mark.parametrize("text, seconds", [("5", 300), ("1:30", 90), ("02:00:00", 7200), ("1-0", 86400),
                                           ("1-2:03", 93780), ("1-02:03:04", 93784)])
def test_slurm_time_formats(text: str, seconds: int) -> None:
    assert slurm_seconds(text) == seconds
