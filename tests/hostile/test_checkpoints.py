"""Checkpoint and run directories are the user's own: ``<storage>/checkpoints/<user>/<run name>``,
checked (owner, mode, no symbolic link) at submit and again by the job script before anything
starts, so another user cannot plant a checkpoint the ranks would load (``torch.load`` runs code)
by creating the predictable directory first.

The job script's part is run by bash itself, cut from the rendered script (``ck_fail`` records the
reason and ends the script, as in the job).  These tests change owners, so they need root."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_one_line_error

OTHER = 65534   # another user (nobody)
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root")
ME = pwd.getpwuid(os.getuid()).pw_name


def _site(tmp_path: Path) -> Path:
    shared = tmp_path / "shared"
    shared.mkdir(exist_ok=True)
    site = tmp_path / "ck.yaml"
    site.write_text((REPO / "site_configs" / "local.yaml").read_text().replace("name: local", "name: ck")
                    + f"storage:\n  - {{path: {shared}, type: local, shared: true, use: [checkpoints]}}\n")
    return site


def _script(ck, tmp_path: Path, *args: str) -> Path:
    run = tmp_path / "run"
    result = ck("submit", "--dry-run", "--no-snapshot",
                "--site", str(_site(tmp_path)), "--out", str(run), *args, "--", "python",
                "t.py", cwd=tmp_path)
    assert result.code == 0, result.err
    return run


def _checkpoint_part(run: Path) -> str:
    text = (run / "job.sbatch").read_text()
    start = text.index("# ---- for the training script: resume from CK_CHECKPOINT_DIR")
    end = text.index("\n", text.index("cannot create $CK_CHECKPOINT_DIR"))
    return text[start:end]


def _run_part(run: Path) -> subprocess.CompletedProcess[str]:
    script = ('ck_fail() { echo "FAILED: $2"; exit "$1"; }\nCK_JOB_ID=42\n'
              f"CK_RUN_DIR={run}\n" + _checkpoint_part(run) + '\necho "DIR=$CK_CHECKPOINT_DIR"\n')
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True)


def test_default_checkpoint_dir_is_per_user_and_private(ck, tmp_path: Path) -> None:
    run = _script(ck, tmp_path)
    got = _run_part(run)
    mine = tmp_path / "shared" / "checkpoints" / ME
    assert got.returncode == 0 and f"DIR={mine}/ck-t-42\n" in got.stdout, got
    assert (mine.stat().st_mode & 0o777, (mine / "ck-t-42").stat().st_mode & 0o777) == (0o700, 0o700)
    assert _run_part(run).returncode == 0      # a restart finds its own directories


def _plant(path: Path, mode: int = 0o755, owner: int = OTHER) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    os.chown(path, owner, owner)


PLANTED = {
    # where (under <storage>/checkpoints), mode, owner, what the job says
    "user-dir-planted": ("{me}", 0o755, OTHER, "is owned by uid 65534, not by you"),
    "run-dir-planted": ("{me}/ck-t-42", 0o777, OTHER, "is owned by uid 65534, not by you"),
    "user-dir-open": ("{me}", 0o777, 0, "is writable by others (mode 777)"),
    "run-dir-open": ("{me}/ck-t-42", 0o757, 0, "is writable by others (mode 757)"),
    "shared-parent-of-another": ("", 0o755, OTHER, "checkpoints is owned by uid 65534"),
    "shared-parent-open-no-sticky": ("", 0o777, 0, "is writable by others (mode 777)"),
}


@needs_root
@pytest.mark.parametrize("name", sorted(PLANTED))
def test_job_script_refuses_a_checkpoint_dir_another_user_could_fill(ck, tmp_path: Path, name: str) -> None:
    where, mode, owner, needle = PLANTED[name]
    run = _script(ck, tmp_path)
    target = tmp_path / "shared" / "checkpoints" / where.format(me=ME)
    _plant(target, mode, owner)
    (target / "model.pt").write_text("planted")
    got = _run_part(run)
    assert got.returncode == 1 and "FAILED: " in got.stdout and needle in got.stdout, got
    assert "another user could plant" in got.stdout and "DIR=" not in got.stdout


@needs_root
def test_job_script_refuses_a_symlinked_checkpoint_dir(ck, tmp_path: Path) -> None:
    run = _script(ck, tmp_path)
    theirs = tmp_path / "theirs"
    _plant(theirs, 0o755, 0)          # even one of yours: the link itself is what another user could swap
    base = tmp_path / "shared" / "checkpoints"
    base.mkdir(parents=True)
    (base / ME).symlink_to(theirs)
    got = _run_part(run)
    assert got.returncode == 1 and "is a symbolic link" in got.stdout, got


def test_a_sticky_shared_parent_is_fine(ck, tmp_path: Path) -> None:
    run = _script(ck, tmp_path)
    base = tmp_path / "shared" / "checkpoints"
    base.mkdir(parents=True)
    os.chmod(base, 0o1777)            # as the admins make it for every user, like /tmp
    got = _run_part(run)
    assert got.returncode == 0, got


@needs_root
def test_job_script_refuses_a_run_directory_of_another_user(ck, tmp_path: Path) -> None:
    run = _script(ck, tmp_path)
    os.chown(run, OTHER, OTHER)
    got = _run_part(run)
    assert got.returncode == 1 and "is owned by uid 65534" in got.stdout, got


def test_checkpoint_part_is_in_every_job_script(ck, tmp_path: Path) -> None:
    run = _script(ck, tmp_path, "--run-name", "my-run")
    part = _checkpoint_part(run)
    assert 'CK_CHECKPOINT_DIR="$ck_checkpoints/$ck_user/$CK_RUN_NAME"' in part and "ck_check_own" in part
    got = _run_part(run)
    assert f"DIR={tmp_path / 'shared' / 'checkpoints' / ME / 'my-run'}\n" in got.stdout, got
    assert subprocess.run(["bash", "-n", str(run / "job.sbatch")]).returncode == 0


# At submit: refused before anything is queued or written.
@needs_root
@pytest.mark.parametrize("where,mode,owner,needle", [
    ("{me}", 0o755, OTHER, "is owned by uid 65534, not by you"),
    ("{me}/my-run", 0o700, OTHER, "is owned by uid 65534, not by you"),
    ("{me}", 0o777, 0, "is writable by others (mode 0777)"),
    ("", 0o777, 0, "is writable by others (mode 0777)"),
    ("", 0o755, OTHER, "is owned by uid 65534"),
])
def test_submit_refuses_checkpoint_dirs_another_user_could_fill(ck, tmp_path: Path, where: str, mode: int,
                                                                owner: int, needle: str) -> None:
    site = _site(tmp_path)
    _plant(tmp_path / "shared" / "checkpoints" / where.format(me=ME), mode, owner)
    result = ck("submit", "--site", str(site), "--out", str(tmp_path / "run"), "--run-name", "my-run",
                "--skip-preflight", "--", "python", "t.py", cwd=tmp_path, env={"XDG_STATE_HOME": str(tmp_path / "h")})
    assert_one_line_error(result, 2, needle, "another user could plant what the job loads")
    assert not (tmp_path / "run").exists()


@needs_root
def test_submit_refuses_an_out_directory_of_another_user(ck, tmp_path: Path) -> None:
    out = tmp_path / "theirs-run"
    _plant(out, 0o777, OTHER)
    result = ck("submit", "--site", str(_site(tmp_path)), "--out", str(out), "--skip-preflight", "--", "python", "t.py",
                cwd=tmp_path, env={"XDG_STATE_HOME": str(tmp_path / "h")})
    assert_one_line_error(result, 2, "theirs-run is owned by uid 65534, not by you")
    assert list(out.iterdir()) == []
