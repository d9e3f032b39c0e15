"""The code snapshot (clusterkit.codesnap): which files it holds (git's, or every regular file),
what it records of git, its limits, the content-addressed store (each object once, the user's
folders checked) and the job's tree of read-only hard links.  Real git, real files."""

from __future__ import annotations

import hashlib
import os
import pwd
import subprocess
from pathlib import Path

import pytest

from clusterkit import codesnap
from clusterkit.config.load import load_site
from clusterkit.config.machine import Storage
from clusterkit.config.schema import Site
from clusterkit.errors import ExitCode, SnapshotError
from clusterkit.job.code import Named, named_script

BIG = codesnap.Limits(max_files=1000, max_bytes=1 << 30)


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git tree: two tracked files, an ignored one, one untracked not ignored; one commit."""
    tree = tmp_path / "repo"
    (tree / "pkg").mkdir(parents=True)
    (tree / "train.py").write_text("print('v1')\n")
    (tree / "pkg" / "__init__.py").write_text("")
    (tree / ".gitignore").write_text("*.ckpt\ndata/\n")
    git(tree, "init", "-q")
    git(tree, "add", "-A")
    git(tree, "commit", "-qm", "one")
    (tree / "model.ckpt").write_bytes(b"\0" * 4096)        # ignored
    (tree / "data").mkdir()
    (tree / "data" / "shard0").write_text("rows\n")         # ignored (a folder)
    return tree


def local() -> Site:
    return load_site("local")


def shared_site(tmp_path: Path) -> tuple[Site, Path]:
    """The local site with shared storage: its store is <shared>/<user>/.clusterkit/code."""
    shared = tmp_path / "shared"
    mine = shared / pwd.getpwuid(os.getuid()).pw_name
    mine.mkdir(parents=True)
    mine.chmod(0o700)
    return local().model_copy(update={"storage": [Storage(path=str(shared), type="nfs")]}), mine / ".clusterkit/code"


def test_a_clean_git_tree_holds_tracked_and_untracked_files_not_ignored_ones(repo: Path, tmp_path: Path) -> None:
    (repo / "notes.py").write_text("x = 1\n")   # untracked, not ignored: in the snapshot, and the tree is dirty
    taken = codesnap.take(local(), None, tmp_path / "run", BIG, write=False, cwd=repo)
    assert taken.paths == {".gitignore", "train.py", "pkg/__init__.py", "notes.py"}
    info = taken.info
    assert info.git and info.commit == git(repo, "rev-parse", "HEAD").strip()
    assert info.dirty is True and info.diff_sha256 is None   # no tracked change: no diff
    assert info.files == 4 and info.bytes == sum((repo / p).stat().st_size for p in taken.paths)
    (repo / "notes.py").unlink()
    clean = codesnap.take(local(), None, tmp_path / "run", BIG, write=False, cwd=repo).info
    assert clean.dirty is False and clean.diff_sha256 is None and clean.tree != info.tree


def test_a_dirty_tree_records_the_hash_of_its_diff(repo: Path, tmp_path: Path) -> None:
    (repo / "train.py").write_text("print('v2')\n")
    info = codesnap.take(local(), None, tmp_path / "run", BIG, write=False, cwd=repo / "pkg").info
    diff = subprocess.run(["git", "-C", str(repo), "diff", "--binary", "HEAD"], check=True, capture_output=True).stdout
    assert info.dirty is True and info.diff_sha256 == hashlib.sha256(diff).hexdigest()
    assert info.workdir == "pkg" and info.source == str(repo.resolve())


def test_links_out_of_the_tree_are_not_followed(tmp_path: Path) -> None:
    tree = tmp_path / "plain"             # not a git tree: every regular file under it
    tree.mkdir()
    (tree / "train.py").write_text("print(1)\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("not code\n")
    (tree / "leak.txt").symlink_to(outside)
    (tree / "alias.py").symlink_to(tree / "train.py")     # inside: read as the file it names
    (tmp_path / "elsewhere").mkdir()
    (tree / "far").symlink_to(tmp_path / "elsewhere")      # a folder outside
    taken = codesnap.take(local(), None, tmp_path / "run", BIG, write=False, cwd=tree)
    assert taken.paths == {"train.py", "alias.py"}
    assert not taken.info.git and taken.info.commit is None
    assert set(taken.info.left_out) == {"leak.txt", "far"}


@pytest.mark.parametrize(("limits", "what"), [
    (codesnap.Limits(max_files=2, max_bytes=1 << 30), "3 files, more than 2"),
    (codesnap.Limits(max_files=1000, max_bytes=10), "more than 10 B"),
])
def test_a_tree_past_the_limits_is_one_line_exit_2_and_nothing_written(repo: Path, tmp_path: Path,
                                                                       limits: codesnap.Limits, what: str) -> None:
    run = tmp_path / "run"
    with pytest.raises(SnapshotError) as err:
        codesnap.take(local(), None, run, limits, write=True, cwd=repo)
    message = str(err.value)
    assert what in message and "--set code_max_files=N" in message and "\n" not in message
    assert err.value.exit_code == ExitCode.USAGE
    assert not run.exists()   # the run directory's private objects went with it


def test_two_snapshots_store_each_object_once_and_jobs_get_read_only_links(repo: Path, tmp_path: Path) -> None:
    site, store = shared_site(tmp_path)
    first = codesnap.take(site, None, tmp_path / "run1", BIG, write=True, cwd=repo)
    objects = sorted(p for p in (store / "objects").rglob("*") if p.is_file())
    assert len(objects) == len({sha for _, sha, _ in first.entries}) == 3   # .gitignore, __init__ (empty), train.py
    assert first.info.store == str(store) and (store / "trees" / f"{first.info.tree}.json").is_file()
    before = {p: p.stat().st_ino for p in objects}
    (repo / "extra.py").write_text("print('v1')\n")   # the same content as train.py: no new object
    second = codesnap.take(site, None, tmp_path / "run2", BIG, write=True, cwd=repo)
    assert sorted(p for p in (store / "objects").rglob("*") if p.is_file()) == objects
    assert {p: p.stat().st_ino for p in objects} == before
    for taken, run in ((first, tmp_path / "run1"), (second, tmp_path / "run2")):
        (run / "staging").mkdir(parents=True, exist_ok=True)
        taken.place(run / "staging")
    a, b = tmp_path / "run1/staging/code/train.py", tmp_path / "run2/staging/code/extra.py"
    assert a.stat().st_ino == b.stat().st_ino and a.read_text() == "print('v1')\n"
    assert not a.stat().st_mode & 0o222 and not (store / "objects").stat().st_mode & 0o077
    for d in (store, store / "objects", store.parent):
        assert (d.stat().st_mode & 0o777) == 0o700


def test_a_store_others_can_write_is_refused(repo: Path, tmp_path: Path) -> None:
    site, store = shared_site(tmp_path)
    store.parent.parent.chmod(0o777)   # <shared>/<you> writable by everyone
    with pytest.raises(SnapshotError) as err:
        codesnap.take(site, None, tmp_path / "run", BIG, write=True, cwd=repo)
    assert "writable by others" in str(err.value) and err.value.exit_code == ExitCode.FAILURE
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("command", "named"), [
    (["python", "train.py", "--lr", "1"], Named("script", "train.py")),
    (["python3", "-u", "sub/train.py"], Named("script", "sub/train.py")),
    (["python", "-m", "pkg.main", "--x"], Named("module", "pkg.main")),
    (["torchrun", "--nproc-per-node", "2", "train.py"], Named("script", "train.py")),
    (["deepspeed", "train.py", "--deepspeed"], Named("script", "train.py")),
    (["accelerate", "launch", "--num_processes", "2", "train.py"], Named("script", "train.py")),
    (["bash", "run.sh"], Named("script", "run.sh")),
    (["bash", "-c", "echo step; exit 3"], None),
    (["bash", "-ec", "echo step"], None),
    (["bash", "-x", "run.sh"], Named("script", "run.sh")),
    (["./run.sh", "a"], Named("script", "./run.sh")),
    (["python", "-W", "ignore", "-c", "print(1)"], None),
    (["python", "-X", "dev", "t.py"], Named("script", "t.py")),
    (["nvidia-smi"], None),
])
def test_the_script_a_command_names(command: list[str], named: Named | None) -> None:
    assert named_script(command) == named


def test_a_script_or_module_missing_from_the_snapshot_is_refused(repo: Path, tmp_path: Path) -> None:
    taken = codesnap.take(local(), None, tmp_path / "run", BIG, write=False, cwd=repo)
    assert codesnap.check_script_of(taken, ["python", "train.py"]) is None
    assert codesnap.check_script_of(taken, ["python", "-m", "json.tool"]) is None   # not the tree's: installed
    for command, what in ((["python", "trian.py"], "trian.py"), (["python", "-m", "pkg.nothere"], "pkg.nothere")):
        with pytest.raises(SnapshotError) as err:
            codesnap.check_script_of(taken, command)
        assert what in str(err.value) and "not in the code snapshot" in str(err.value)
    note = codesnap.check_script_of(taken, ["python", str(tmp_path / "elsewhere.py")])
    assert note is not None and "outside the snapshot" in note
    note = codesnap.check_script_of(taken, ["python", str(repo / "train.py")])
    assert note is not None and "by its absolute path" in note


def test_earlier_run_directories_are_left_out_and_kept_examples_stay(repo: Path, tmp_path: Path) -> None:
    for folder, written in (("old-run", True), ("golden/case", False)):
        (repo / folder).mkdir(parents=True)
        (repo / folder / "job.sbatch").write_text("#!/bin/bash\n")
        (repo / folder / "plan.json").write_text("{}\n")
        if written:   # a run directory clusterkit wrote has its logs folder
            (repo / folder / "logs").mkdir()
    (repo / "runs" / "x").mkdir(parents=True)
    (repo / "runs" / "x" / "f.py").write_text("")
    state = repo / "state"
    state.mkdir()
    (state / "record.json").write_text("{}")
    taken = codesnap.take(local(), None, tmp_path / "run", BIG, write=False, cwd=repo, skip=(state,))
    assert {"golden/case/job.sbatch", "golden/case/plan.json"} <= taken.paths
    assert not {p for p in taken.paths if p.startswith(("old-run/", "runs/", "state/"))}


def test_the_job_starts_where_submit_ran_also_through_a_link(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(repo)
    info = codesnap.take(local(), None, tmp_path / "run", BIG, write=False, cwd=tmp_path / "link" / "pkg").info
    assert info.workdir == "pkg" and info.job_dir("/r") == "/r/code/pkg"
