"""Which files a snapshot holds: git's (tracked, and untracked not ignored) in a git tree, else
every regular file under the directory; no symbolic link is followed out of the tree.

git runs as a subprocess with a list argv (never a shell), bounded in time and output.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit import jobfiles
from clusterkit.errors import ExitCode, SnapshotError

GIT_TIMEOUT_S = 60
_MAX_GIT_OUTPUT = 256 << 20   # a listing or diff past this is no code tree's


@dataclass
class Listing:
    """The files of one tree: relative path -> absolute path of what to read (a link inside the
    tree is read as the file it names), and what git says of the tree."""

    root: Path
    files: dict[str, Path] = field(default_factory=dict)
    git: bool = False
    commit: str | None = None
    dirty: bool | None = None
    diff_sha256: str | None = None
    left_out: list[str] = field(default_factory=list)   # links leading out of the tree


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes] | None:
    """``git -C root ARGS`` (list argv, no shell); None when git is missing or does not answer."""
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=GIT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if len(proc.stdout) > _MAX_GIT_OUTPUT:
        raise SnapshotError(f"code snapshot of {root}: `git {args[0]}` printed more than 256 MiB; not a code tree")
    return proc


def git_top(directory: Path) -> Path | None:
    """The top of the git working tree holding ``directory``, or None (not in one, or no git)."""
    proc = _git(directory, "rev-parse", "--show-toplevel")
    if proc is None or proc.returncode != 0:
        return None
    top = proc.stdout.decode("utf-8", "surrogateescape").strip()
    return Path(top) if top and os.path.isabs(top) else None


def list_git(top: Path) -> Listing:
    """git's files of the tree at ``top``, with its commit, whether it is dirty and its diff's hash."""
    listing = Listing(top.resolve(), git=True)
    proc = _git(top, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if proc is None or proc.returncode != 0:
        why = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] if proc else ["git did not answer"]
        raise SnapshotError(f"code snapshot of {top}: git ls-files failed ({(why or ['?'])[0][:200]})",
                            exit_code=ExitCode.FAILURE)
    seen: set[str] = set()
    for raw in proc.stdout.split(b"\0"):
        rel = os.fsdecode(raw)
        if not rel or rel in seen:   # a path in conflict is listed once per stage
            continue
        seen.add(rel)
        _add(listing, rel)
    head = _git(top, "rev-parse", "--verify", "-q", "HEAD")
    listing.commit = head.stdout.decode("ascii", "replace").strip() if head and head.returncode == 0 else None
    status = _git(top, "status", "--porcelain", "-z", "--untracked-files=normal")
    listing.dirty = bool(status.stdout) if status is not None and status.returncode == 0 else None
    if listing.commit:
        diff = _git(top, "diff", "--binary", "HEAD")
        if diff is not None and diff.returncode == 0 and diff.stdout:
            listing.diff_sha256 = hashlib.sha256(diff.stdout).hexdigest()
    return listing


def list_dir(root: Path, skip: tuple[Path, ...] = (), cap: int | None = None) -> Listing:
    """Every regular file under ``root`` (not a git tree, or ``--code DIR``), the folders ``skip``
    left out; the walk stops once it found more than ``cap`` files (the limit's error follows)."""
    listing = Listing(root.resolve())
    for dirpath, dirnames, filenames in os.walk(listing.root, followlinks=False):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d not in _NEVER and here / d not in skip)
        if cap is not None and len(listing.files) > cap:
            break
        for name in sorted(filenames) + [d for d in dirnames if (here / d).is_symlink()]:
            _add(listing, str((here / name).relative_to(listing.root)))
    return listing


_NEVER = frozenset({".git", ".clusterkit"})   # git's own database, clusterkit's store


def prune(listing: Listing, skip: tuple[Path, ...] = ()) -> None:
    """Leave out what is no code: the directories ``skip`` (the run directory being written, the
    run directories' folder) and every clusterkit run directory in the tree (a folder holding
    ``job.sbatch``, ``plan.json`` and a ``logs`` folder: an earlier job's, with its own snapshot;
    a rendered example kept in the repository, with no ``logs``, stays)."""
    runs = {rel.rsplit("/", 1)[0] for rel in listing.files if rel.endswith("/job.sbatch")}
    runs &= {rel.rsplit("/", 1)[0] for rel in listing.files if rel.endswith("/plan.json")}
    runs = {run for run in runs if jobfiles.logs(listing.root / run).is_dir()}   # written: a kept example is code
    for where in skip:
        if where.is_relative_to(listing.root) and where != listing.root:
            runs.add(str(where.relative_to(listing.root)))
    if runs:
        listing.files = {rel: p for rel, p in listing.files.items()
                         if not any(rel.startswith(run + "/") for run in runs)}


def _add(listing: Listing, rel: str) -> None:
    """Add ``rel`` if it is a regular file, or a link to one inside the tree; a directory git
    lists (a submodule) adds its files; a link out of the tree is left out and noted."""
    path = listing.root / rel
    try:
        st = os.lstat(path)
    except FileNotFoundError:   # tracked, deleted in the working tree: not in the snapshot
        return
    if stat.S_ISREG(st.st_mode):
        listing.files[rel] = path
    elif stat.S_ISLNK(st.st_mode):
        target = path.resolve()
        if not target.is_relative_to(listing.root):
            listing.left_out.append(rel)
        elif target.is_file():
            listing.files[rel] = target
    elif stat.S_ISDIR(st.st_mode) and listing.git:   # a submodule: its files as a plain tree
        sub = list_dir(path)
        for inner, where in sub.files.items():
            listing.files[f"{rel}/{inner}"] = where
        listing.left_out += [f"{rel}/{x}" for x in sub.left_out]
