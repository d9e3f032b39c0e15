"""The code as it was at submit time (docs/jobs.md, "The code as it was").

:func:`take` lists the files of the working tree (git's tracked and untracked-not-ignored files
in a git tree; every regular file under the directory otherwise, or under ``--code DIR``),
checks them against the limits, hashes each (sha256) and, when writing, stores it once in the
content-addressed store (:mod:`clusterkit.codesnap.store`); :meth:`Taken.place` makes the job's
tree in the run directory's staging folder, so it appears with the rest of the run directory or
not at all.  Without a store here (a local site, no shared folder of yours), the objects go to a
private folder in the run directory and the tree is made from it the same way.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from clusterkit.codesnap import listing as ls
from clusterkit.codesnap import store
from clusterkit.config.schema import Site
from clusterkit.errors import ExitCode, SnapshotError
from clusterkit.job.code import CODE_DIR, CODE_STAGING, CodeSnapshot, module_paths, named_script, size_text
from clusterkit.job.plan import Plan

_LEFT_OUT_SHOWN = 5
_EMPTY = CodeSnapshot(source="", tree="", files=0, bytes=0)


@dataclass(frozen=True)
class Limits:
    max_files: int
    max_bytes: int


@dataclass
class Taken:
    """A snapshot taken: what the plan records, and how to make the job's tree."""

    info: CodeSnapshot
    entries: list[tuple[str, str, bool]]     # (path, sha256, executable), sorted by path
    manifest: bytes
    objects: Path | None = None              # where the objects are (None: not written: a dry run)
    private: Path | None = None              # the run directory's own object folder, removed once placed
    made: tuple[Path, ...] = ()              # the folders taking the snapshot created (the run directory, ...)
    paths: set[str] = field(default_factory=set)

    def place(self, staging: Path) -> None:
        """Make the job's tree as ``staging/code`` (the run directory's writer moves it in)."""
        if self.objects is None:
            return
        try:
            store.materialise(self.objects, self.entries, staging / CODE_DIR)
        except OSError as exc:
            raise SnapshotError(f"code snapshot: cannot make the job's tree in {staging.parent}/{CODE_DIR} "
                                f"({exc.strerror or exc})", exit_code=ExitCode.FAILURE) from None
        self.discard()

    def noted(self, plan: Plan, *, check_script: bool) -> tuple[Plan, SnapshotError | None]:
        """``plan`` with the snapshot's warnings (links left out of it, a script outside it), and the
        error for a script it lacks (``check_script``), which the caller raises once the rest passed."""
        notes = []
        if self.info.left_out:
            notes.append(f"code: links leading out of {self.info.source} are not in the snapshot: "
                         f"{', '.join(self.info.left_out)}")
        try:
            note = check_script_of(self, plan.command) if check_script else None
        except SnapshotError as exc:
            return plan, exc
        return replace(plan, warnings=(*plan.warnings, *notes, *([note] if note else []))), None

    def discard(self) -> None:
        """Remove the run directory's private object folder (the shared store keeps its objects)."""
        if self.private is not None:
            _remove_tree(self.private)
            self.private = None

    def abandon(self) -> None:
        """Undo what taking the snapshot made in the run directory (the run was not written)."""
        self.discard()
        for folder in self.made:   # deepest first, each only if empty: nothing else was written
            with contextlib.suppress(OSError):
                folder.rmdir()


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)   # read-only files in folders we made: unlinked all the same


def take(site: Site, code_dir: str | None, run_dir: Path, limits: Limits, *, write: bool,
         cwd: Path | None = None, skip: tuple[Path, ...] = ()) -> Taken:
    """Snapshot the code for a job whose run directory is ``run_dir``: ``code_dir`` (``--code``),
    else the git tree holding the current directory, else the current directory.  The run
    directory, ``./runs``, the folders ``skip`` (clusterkit's state) and earlier run directories
    in the tree are left out."""
    here = Path(os.path.abspath(cwd or Path.cwd()))
    left_out = tuple(Path(os.path.realpath(p)) for p in (run_dir, here / "runs", *skip))
    if code_dir is not None:
        root = Path(os.path.abspath(os.path.expanduser(code_dir)))
        if not root.is_dir():
            raise SnapshotError(f"--code {code_dir}: not a directory")
        found = ls.list_dir(root, left_out, limits.max_files)
    else:
        top = ls.git_top(here)
        found = ls.list_git(top) if top is not None else ls.list_dir(here, left_out, limits.max_files)
    ls.prune(found, left_out)
    real = Path(os.path.realpath(here))   # the tree's root is resolved: so is where the job starts
    workdir = str(real.relative_to(found.root)) if real.is_relative_to(found.root) else ""
    _check_counts(found, limits)
    made = tuple(p for p in (run_dir, *run_dir.parents) if not p.exists()) if write else ()
    objects, private = _objects(site, run_dir, write)
    try:
        entries: list[tuple[str, str, bool]] = []
        left = limits.max_bytes
        total = 0
        for rel in sorted(found.files):
            path = found.files[rel]
            try:
                executable = bool(os.stat(path).st_mode & stat.S_IXUSR)
                sha, size, data = store.hash_file(path, left)
                if objects is not None:
                    store.store_object(objects, path, sha, executable, data)
            except store.TooBig:
                raise SnapshotError(_too_big(found.root, f"more than {size_text(limits.max_bytes)}", limits)) from None
            except OSError as exc:
                raise SnapshotError(f"code snapshot of {found.root}: cannot read {rel} "
                                    f"({exc.strerror or exc})") from None
            left -= size
            total += size
            entries.append((rel, sha, executable))
    except BaseException:
        Taken(_EMPTY, [], b"", objects, private, made).abandon()
        raise
    manifest = json.dumps({"version": 1, "files": entries}, separators=(",", ":")).encode()
    tree = hashlib.sha256(manifest).hexdigest()
    shared = objects is not None and private is None
    if shared and objects is not None:
        store.write_tree(objects.parent, tree, manifest)
    info = CodeSnapshot(source=str(found.root), tree=tree, files=len(entries), bytes=total,
                        workdir="" if workdir == "." else workdir, git=found.git, commit=found.commit,
                        dirty=found.dirty, diff_sha256=found.diff_sha256,
                        store=str(objects.parent) if shared and objects is not None else None,
                        left_out=tuple(found.left_out[:_LEFT_OUT_SHOWN]))
    return Taken(info, entries, manifest, objects, private, made, {e[0] for e in entries})


def _objects(site: Site, run_dir: Path, write: bool) -> tuple[Path | None, Path | None]:
    """Where to write the objects: the shared store, else a private folder in the run directory."""
    if not write:
        return None, None
    shared = store.shared_store(site, run_dir)
    if shared is not None:
        return store.open_store(shared), None
    private = run_dir / CODE_STAGING
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        os.mkdir(private, 0o700)
    except OSError as exc:
        raise SnapshotError(f"code snapshot: cannot create {private} ({exc.strerror or exc})",
                            exit_code=ExitCode.FAILURE) from None
    return private, private


def _check_counts(found: ls.Listing, limits: Limits) -> None:
    if len(found.files) > limits.max_files:
        raise SnapshotError(_too_big(found.root, f"{len(found.files)} files, more than {limits.max_files}", limits))
    total = 0
    for path in found.files.values():
        with _ignore_missing():
            total += os.stat(path).st_size
    if total > limits.max_bytes:
        what = f"{size_text(total)}, more than {size_text(limits.max_bytes)}"
        raise SnapshotError(_too_big(found.root, what, limits))


class _ignore_missing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: object, tb: object) -> bool:
        return isinstance(exc, FileNotFoundError)


def _too_big(root: Path, what: str, limits: Limits) -> str:
    return (f"code snapshot of {root}: {what} (code.max_files {limits.max_files}, code.max_mb "
            f"{limits.max_bytes >> 20}): leave data out of the tree (.gitignore), snapshot a smaller one with "
            "--code DIR, raise the limit with --set code_max_files=N / code_max_mb=N, or submit with --no-snapshot")


def check_script_of(taken: Taken, command: Sequence[str]) -> str | None:
    """Refuse a command whose script is missing from the snapshot (exit 2); a note (None: none)
    for a script named by a path outside the snapshot, which the job reads as it is then."""
    named = named_script(command)
    if named is None:
        return None
    info = taken.info
    if named.kind == "module":
        wanted = [posixpath.normpath(posixpath.join(info.workdir, p)) for p in module_paths(named.name)]
        top = named.name.split(".")[0]
        ours = any(p == top or p.startswith(top + "/") or p == top + ".py"
                   for p in (posixpath.relpath(x, info.workdir or ".") for x in taken.paths))
        if ours and not any(w in taken.paths for w in wanted):
            raise SnapshotError(f"the command runs module {named.name}, which is not in the code snapshot of "
                                f"{info.source} (looked for {', '.join(wanted)})")
        return None
    if os.path.isabs(named.name):
        source = Path(info.source)
        if not Path(named.name).is_relative_to(source):
            return (f"code: the command's script {named.name} is outside the snapshot of {info.source}: the job "
                    "runs it as it is when the job starts")
        rel = str(Path(named.name).relative_to(source))
        if rel not in taken.paths:
            raise SnapshotError(_missing(named.name, info))
        return (f"code: the command names {named.name} by its absolute path: the job runs that file as it is when "
                "the job starts, not the snapshot's copy (a path relative to the working directory would)")
    rel = posixpath.normpath(posixpath.join(info.workdir, named.name))
    if rel not in taken.paths:
        raise SnapshotError(_missing(named.name, info))
    return None


def _missing(name: str, info: CodeSnapshot) -> str:
    where = f" (working directory {info.workdir}/)" if info.workdir else ""
    why = " (tracked, or untracked and not ignored, by git)" if info.git else ""
    return (f"the command's script {name} is not in the code snapshot of {info.source}{where}: "
            f"the job would not find it; a snapshot holds the tree's files{why}")
