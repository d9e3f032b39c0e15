"""The code a job runs, as it was at submit time: what the plan records of the snapshot
(:class:`CodeSnapshot`, taken by :mod:`clusterkit.codesnap`), and which file of it the
training command names (:func:`named_script`, for ``submit``'s check).  Pure: no file is read here.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

CODE_DIR = "code"   # the snapshot's tree inside the run directory
CODE_STAGING = ".clusterkit-code"   # the run directory's own objects while it is written (no shared store)


@dataclass(frozen=True)
class CodeSnapshot:
    """One snapshot of the working tree (or ``--code DIR``), as the job sees it.

    ``tree`` is the sha256 of the snapshot's manifest (every path, its content's sha256 and
    whether it is executable), so two snapshots with equal ``tree`` hold the same files.
    ``workdir`` is where the job starts, relative to the tree's root (the directory
    ``submit`` ran in, when it lies inside the tree)."""

    source: str                 # the directory snapshotted (the git tree's top, or --code DIR)
    tree: str                   # sha256 of the manifest
    files: int
    bytes: int
    workdir: str = ""           # relative to the tree's root; "" is the root
    git: bool = False           # the files are git's (tracked, and untracked not ignored)
    commit: str | None = None   # HEAD, when git has one
    dirty: bool | None = None   # any change to tracked files, or an untracked file (git only)
    diff_sha256: str | None = None   # sha256 of `git diff --binary HEAD` when it is not empty
    store: str | None = None    # the content-addressed store holding its objects; None: copied into the run directory
    left_out: tuple[str, ...] = ()   # links not followed out of the tree (the first few)

    def job_dir(self, run_dir: str) -> str:
        """The job's working directory: the snapshot inside ``run_dir``."""
        base = posixpath.join(run_dir, CODE_DIR)
        return posixpath.join(base, self.workdir) if self.workdir else base

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["left_out"] = list(self.left_out)
        return d

    @classmethod
    def from_dict(cls, d: object) -> CodeSnapshot | None:
        """The snapshot a record's plan holds, its fields checked (None: none, or not one)."""
        if not isinstance(d, dict):
            return None
        text = ("source", "tree")
        counts = ("files", "bytes")
        if not all(isinstance(d.get(k), str) for k in text) or not all(
                isinstance(d.get(k), int) and not isinstance(d.get(k), bool) for k in counts):
            return None
        def text_or_none(key: str) -> str | None:
            value = d.get(key)
            return value if isinstance(value, str) else None

        return cls(source=d["source"], tree=d["tree"], files=d["files"], bytes=d["bytes"],
                   workdir=text_or_none("workdir") or "", git=d.get("git") is True,
                   dirty=d["dirty"] if isinstance(d.get("dirty"), bool) else None, commit=text_or_none("commit"),
                   diff_sha256=text_or_none("diff_sha256"), store=text_or_none("store"))

    def worded(self) -> str:
        """One line for ``submit``: what the job runs."""
        what = f"{self.files} file(s), {size_text(self.bytes)}"
        if not self.git:
            return f"code: snapshot of {self.source} ({what}; not a git tree), tree {self.tree[:12]}"
        state = "clean" if not self.dirty else (f"dirty, diff {self.diff_sha256[:12]}" if self.diff_sha256
                                                 else "dirty: untracked files")
        commit = self.commit[:12] if self.commit else "no commit yet"
        return f"code: snapshot of {self.source} at {commit} ({state}; {what}), tree {self.tree[:12]}"


def size_text(n: int) -> str:
    """``n`` bytes in B, KiB, MiB or GiB."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_LAUNCHERS = ("torchrun", "deepspeed", "accelerate")
_PYTHON_VALUED = ("-W", "-X", "-Q")   # python options that take the next word


@dataclass(frozen=True)
class Named:
    """What a training command runs: a script (a path) or a module (``python -m``)."""

    kind: str     # "script" | "module"
    name: str


def named_script(command: Sequence[str]) -> Named | None:
    """The script or module ``command`` runs: ``python [-u] X.py``, ``python -m pkg.mod``,
    ``torchrun ... X.py``, ``deepspeed X.py``, ``accelerate launch X.py``, ``bash X.sh`` or
    ``./X``; None when it names none that clusterkit can tell (``python -c``, ``bash -c``, a program
    on PATH)."""
    if not command:
        return None
    head = os.path.basename(command[0])
    words = list(command[1:])
    if head in ("bash", "sh"):
        for word in words:
            if not word.startswith("-"):
                return Named("script", word)
            if "c" in word.lstrip("-") and not word.startswith("--"):   # -c, -ec: the command is text, no file
                return None
        return None
    if _PYTHON.fullmatch(head):
        skip = False
        for i, word in enumerate(words):
            if skip:
                skip = False
            elif word == "-c":
                return None
            elif word == "-m":
                return Named("module", words[i + 1]) if i + 1 < len(words) else None
            elif word in _PYTHON_VALUED:
                skip = True
            elif not word.startswith("-"):
                return Named("script", word)   # python runs its first plain word, whatever its name
        return None
    if head in _LAUNCHERS:
        for i, word in enumerate(words):
            if word in ("-m", "--module"):   # the launcher's module flag: the next plain word is the module
                after = [w for w in words[i + 1:] if not w.startswith("-")]
                return Named("module", after[0]) if after else None
            if not word.startswith("-") and word.endswith(".py"):
                return Named("script", word)
        return None
    if "/" in command[0]:
        return Named("script", command[0])
    return None


def module_paths(module: str) -> tuple[str, ...]:
    """The files that would provide ``module`` (``pkg.mod``) relative to the working directory."""
    base = module.replace(".", "/")
    return (f"{base}.py", f"{base}/__main__.py", f"{base}/__init__.py")
