"""Checkpoint and run directories are the user's own, checked again by the supervisor before it
starts the launch (the job script checked them a moment before; docs/architecture.md §3).

A run's checkpoints are loaded by every rank (``torch.load`` runs code), so a folder on that path
that another user owns, that others can write, or that is a symbolic link, ends the job before any
rank starts: the same rule as the job script's ``ck_check_own``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path


def why_not_own(path: str, kind: str) -> str | None:
    """Why ``path`` is not the user's alone (None if it is, or is missing).  ``kind``: ``own``
    (a checkpoint folder: no symbolic link either) or ``run`` (the run directory)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return f"cannot read the owner of {path}"
    if kind == "own" and stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    try:
        st = os.stat(path)
    except OSError:
        return f"cannot read the owner of {path}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != os.getuid():
        return f"{path} is owned by uid {st.st_uid}, not by you"
    if st.st_mode & stat.S_IWOTH:
        return f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def problem(env: Mapping[str, str]) -> str | None:
    """The reason the job must not start, from CK_RUN_DIR and CK_CHECKPOINT_DIR (and the user's
    folder above it), or None."""
    checks = [(env.get("CK_RUN_DIR", ""), "run")]
    ckpt = env.get("CK_CHECKPOINT_DIR", "")
    if ckpt:
        checks += [(str(Path(ckpt).parent), "own"), (ckpt, "own")]
    for path, kind in checks:
        why = why_not_own(path, kind) if path else None
        if why:
            return f"{why}: another user could plant what this job loads (see clusterkit's Security model)"
    return None
