"""``python -m clusterkit.supervise``: its argv and environment as the job script hands them over."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.supervise.__main__ import parse
from clusterkit.supervise.endgame import Spec

ENV = {"CK_RUN_DIR": "/shared/runs/a", "CK_JOB_ID": "4321_7", "SLURM_RESTART_COUNT": "1"}


def test_the_job_scripts_call_becomes_a_spec() -> None:
    spec = parse(["--mode", "step", "--grace-s", "30", "--max-restarts", "2", "--stop-signal", "USR1",
                  "--requeue-by", "framework", "--chain-ids", "/shared/runs/chain.ids", "--chain-stops",
                  "user-code import-env", "--", "srun", "--nodes=2", "bash", "-c", "exec \"$@\"", "--", "x"], ENV)
    assert spec == Spec(launch=("srun", "--nodes=2", "bash", "-c", "exec \"$@\"", "--", "x"), mode="step",
                        run_dir="/shared/runs/a", job_id="4321_7", restarts=1, max_restarts=2, grace_s=30,
                        stop_signal="USR1", requeue_by="framework", chain_ids="/shared/runs/chain.ids",
                        chain_stops=("user-code", "import-env"))


def test_a_straggler_ratio_to_replace_by_reaches_the_spec() -> None:
    spec = parse(["--mode", "step", "--max-relaunches", "3", "--straggler-replace", "1.5", "--", "srun"], ENV)
    assert (spec.straggler_replace, spec.max_relaunches) == (1.5, 3)
    assert parse(["--mode", "step", "--", "srun"], ENV).straggler_replace == 0.0


def test_the_check_after_a_hang_reaches_the_spec() -> None:
    spec = parse(["--mode", "step", "--max-relaunches", "3", "--hang-check-site", "/s/site.yaml", "--hang-check-stage",
                  "multi-node", "--hang-check-s", "360", "--", "srun"], ENV)
    assert spec.hang_check == ("/s/site.yaml", "multi-node", 360.0)
    assert parse(["--mode", "step", "--", "srun"], ENV).hang_check is None


def test_a_local_job_has_no_restart_count() -> None:
    spec = parse(["--mode", "local", "--", "bash", "-c", "true"], {"CK_RUN_DIR": "/r", "CK_JOB_ID": "local-9"})
    assert (spec.mode, spec.restarts, spec.launch) == ("local", 0, ("bash", "-c", "true"))


@pytest.mark.parametrize("argv,env,words", [
    (["--mode", "step"], ENV, "no launch command after --"),
    (["--mode", "step", "--"], ENV, "no launch command after --"),
    (["--mode", "nowhere", "--", "srun"], ENV, "--mode"),
    (["--mode", "step", "--grace-s", "-1", "--", "srun"], ENV, "--grace-s"),
    (["--mode", "step", "--stop-signal", "TERM;id", "--", "srun"], ENV, "--stop-signal"),
    (["--mode", "step", "--straggler-replace", "1", "--", "srun"], ENV, "--straggler-replace"),
    (["--mode", "step", "--hang-check-site", "/s.yaml", "--", "srun"], ENV, "--hang-check-stage"),
    (["--mode", "step", "--hang-check-site", "/s", "--hang-check-stage", "x", "--hang-check-s", "0", "--", "srun"],
     ENV, "--hang-check-s"),
    (["--mode", "step", "--", "srun"], {"CK_RUN_DIR": "/r"}, "CK_JOB_ID not set"),
    (["--mode", "step", "--", "srun"], {**ENV, "SLURM_RESTART_COUNT": "x"}, "SLURM_RESTART_COUNT='x'"),
])
def test_a_wrong_call_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                             env: dict[str, str], words: str) -> None:
    with pytest.raises(SystemExit) as stop:
        parse(argv, env)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and err.startswith("clusterkit supervise: ")


def _supervise(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    return subprocess.run([sys.executable, "-m", "clusterkit.supervise", *argv], capture_output=True, text=True,
                          env={**keep, **env}, timeout=60)


def test_as_a_process_a_wrong_call_has_no_traceback() -> None:
    p = _supervise("--mode", "step", **ENV)
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_a_local_launcher_ending_on_its_own_leaves_its_status_in_the_result(tmp_path: Path) -> None:
    p = _supervise("--mode", "local", "--", "bash", "-c", "exit 3", CK_RUN_DIR=str(tmp_path), CK_JOB_ID="local-1")
    assert p.returncode == 3, p.stderr
    assert "launcher exited with status 3" in p.stderr
    assert (tmp_path / "local-1.result").read_text() == "3\n" and not (tmp_path / "local-1.reason").exists()


def test_a_launcher_that_cannot_start_is_status_127_with_one_line(tmp_path: Path) -> None:
    p = _supervise("--mode", "local", "--", str(tmp_path / "no-such-launcher"), CK_RUN_DIR=str(tmp_path),
                   CK_JOB_ID="local-2")
    assert p.returncode == 127 and "Traceback" not in p.stderr, p.stderr
    assert f"clusterkit: {tmp_path}/no-such-launcher: No such file or directory" in p.stderr
    assert (tmp_path / "local-2.result").read_text() == "127\n"


def test_a_checkpoint_folder_that_is_a_link_or_others_can_write_ends_the_job_before_the_launch(tmp_path: Path) -> None:
    mine = tmp_path / "checkpoints" / "me"
    mine.mkdir(parents=True, mode=0o700)
    (tmp_path / "elsewhere").mkdir()
    (mine / "run-a").symlink_to(tmp_path / "elsewhere")
    marker = tmp_path / "launched"
    p = _supervise("--mode", "local", "--", "touch", str(marker), CK_RUN_DIR=str(tmp_path), CK_JOB_ID="local-3",
                   CK_CHECKPOINT_DIR=str(mine / "run-a"))
    assert p.returncode == 1 and not marker.exists(), p.stderr
    assert (tmp_path / "local-3.reason").read_text().startswith(f"{mine / 'run-a'} is a symbolic link: another user")
    (mine / "run-a").unlink()
    (mine / "run-a").mkdir(mode=0o700)
    os.chmod(mine / "run-a", 0o777)   # chmod: mkdir's mode is cut by the umask
    p = _supervise("--mode", "local", "--", "touch", str(marker), CK_RUN_DIR=str(tmp_path), CK_JOB_ID="local-4",
                   CK_CHECKPOINT_DIR=str(mine / "run-a"))
    assert p.returncode == 1 and not marker.exists(), p.stderr
    assert "is writable by others (mode 777)" in (tmp_path / "local-4.reason").read_text()
    os.chmod(mine / "run-a", 0o700)
    p = _supervise("--mode", "local", "--", "touch", str(marker), CK_RUN_DIR=str(tmp_path), CK_JOB_ID="local-5",
                   CK_CHECKPOINT_DIR=str(mine / "run-a"))
    assert p.returncode == 0 and marker.exists(), p.stderr
