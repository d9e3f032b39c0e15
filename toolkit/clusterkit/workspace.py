"""Run directories: where rendered artifacts land, written atomically.

Artifacts are written into a hidden temporary directory beside the target and renamed into
place in one step, so a run directory either holds every artifact or does not exist: a
failure (disk full, permission, Ctrl-C) never leaves a half-written job behind.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Mapping

from clusterkit.errors import WorkspaceError

EXECUTABLE = {"job.sbatch"}
_BAD_PATH_CHARS = re.compile(r'[\x00-\x1f\x7f"]')


def check_path(path: Path) -> Path:
    """Refuse what an #SBATCH line cannot carry: control characters (a newline would start a
    live shell line) and double quotes (the quoting sbatch understands there)."""
    if _BAD_PATH_CHARS.search(str(path)):
        raise WorkspaceError(f"run directory {str(path)!r}: control characters and double quotes are not allowed "
                             "in run directory paths")
    too_long = next((part for part in path.parts if len(os.fsencode(part)) > 255), None)
    if too_long is not None:
        raise WorkspaceError(f"run directory {_short(str(path))!r}: the name {_short(too_long)!r} is longer than "
                             "255 bytes, the most a file system allows")
    if len(os.fsencode(str(path))) > 4000:
        raise WorkspaceError(f"run directory {_short(str(path))!r}: the path is longer than 4000 bytes")
    return path


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def default_run_dir(job_name: str, base: Path | None = None) -> Path:
    """``./runs/<job>-<UTC timestamp>``, made unique if two renders land in the same second."""
    base = base or Path.cwd() / "runs"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    candidate = base / f"{job_name}-{stamp}"
    n = 1
    while candidate.exists():
        n += 1
        candidate = base / f"{job_name}-{stamp}-{n}"
    return candidate


def resolve_out(out: str | None, job_name: str) -> Path:
    """The absolute run directory for ``--out`` (or the default), checked before any rendering."""
    path = Path(out).expanduser() if out else default_run_dir(job_name)
    path = check_path(Path(os.path.abspath(path)))
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise WorkspaceError(f"--out {out or path}: {path} already exists and is not empty; choose a new directory")
    parent = path.parent
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise WorkspaceError(f"--out {out or path}: cannot create {path}: {probe} is not a writable directory")
    return path


def write_run_dir(path: Path, artifacts: Mapping[str, str]) -> Path:
    """Write every artifact into ``path`` atomically (temp dir + rename); return ``path``."""
    path = check_path(Path(os.path.abspath(path)))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    except OSError as exc:
        raise WorkspaceError(f"cannot create run directory {path}: {exc.strerror or exc}") from None
    try:
        for name, text in artifacts.items():
            target = tmp / name
            target.write_text(text, encoding="utf-8")
            os.chmod(target, 0o755 if name in EXECUTABLE else 0o644)
        (tmp / "logs").mkdir()
        os.chmod(tmp, 0o755)
        if path.exists():
            path.rmdir()  # resolve_out allowed only an empty directory here
        os.rename(tmp, path)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise WorkspaceError(f"cannot write run directory {path}: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path
