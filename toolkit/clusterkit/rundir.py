"""Run directories: where rendered artifacts land, never half-written.

A run directory is claimed with ``mkdir`` (atomic: of two renders that pick the same name in
the same second, one gets ``-2``), or is the user's existing empty ``--out`` directory, which
is kept as it is (its mode, group and ACLs are the user's choice).  Artifacts are written into
a hidden staging directory inside it, so they take the run directory's group, and then moved
into place; a failure (disk full, permission, Ctrl-C) removes them again, so no half-written
job is left behind.  Everything is created with the user's umask: job.sbatch holds the
command line, and who may read it is the user's decision.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from clusterkit import jobfiles
from clusterkit.errors import RunDirError
from clusterkit.job.code import CODE_DIR, CODE_STAGING
from clusterkit.safefile import not_own_dir

if TYPE_CHECKING:
    from clusterkit.config.schema import Site
    from clusterkit.job.plan import Plan

EXECUTABLE = {"job.sbatch"}


@dataclass(frozen=True)
class RenderedRun:
    """A written run directory: the site and plan it was rendered from, and its artifacts.
    What :func:`clusterkit.actions.render_run` returns and a scheduler submits."""

    site: Site
    plan: Plan
    artifacts: dict[str, str]
    run_dir: Path

    @property
    def script(self) -> Path:
        return self.run_dir / "job.sbatch"

STAGING = ".clusterkit-staging"
_BAD_PATH_CHARS = re.compile(r'[\x00-\x1f\x7f"]')


def check_path(path: Path) -> Path:
    """Refuse what an #SBATCH line cannot carry: control characters (a newline would start a
    live shell line) and double quotes (the quoting sbatch understands there)."""
    if _BAD_PATH_CHARS.search(str(path)):
        raise RunDirError(f"run directory {str(path)!r}: control characters and double quotes are not allowed "
                             "in run directory paths")
    too_long = next((part for part in path.parts if len(os.fsencode(part)) > 255), None)
    if too_long is not None:
        raise RunDirError(f"run directory {_short(str(path))!r}: the name {_short(too_long)!r} is longer than "
                             "255 bytes, the most a file system allows")
    if len(os.fsencode(str(path))) > 4000:
        raise RunDirError(f"run directory {_short(str(path))!r}: the path is longer than 4000 bytes")
    return path


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class RunDir:
    """A resolved run directory, and the directories resolving it created (deepest first):
    the default one and any missing ``./runs``; an ``--out`` directory is only checked."""

    path: Path
    made: tuple[Path, ...] = ()

    def release(self) -> None:
        """Remove the directories resolving created, those still empty: nothing was written."""
        for directory in self.made:
            _remove_empty(directory)


def _remove_empty(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not empty (filled after all) or already gone: nothing of ours
        directory.rmdir()


def default_run_dir(job_name: str, base: Path | None = None) -> RunDir:
    """Create and return ``./runs/<job>-<UTC timestamp>`` (``-2``, ``-3`` ... when taken).

    Created here, not merely named: ``mkdir`` fails for all but one of several renders that
    race for one name, where an exists-check would let two of them pick it.
    """
    base = check_path(Path(os.path.abspath(base or Path.cwd() / "runs")))
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    job_name = job_name.replace(":", "-")   # Slurm's job name may hold ':'; a path a container mounts may not
    missing = [p for p in (base, *base.parents) if not p.exists()]   # deepest first
    try:
        base.mkdir(parents=True, exist_ok=True)
        for n in itertools.count(1):
            candidate = base / (f"{job_name}-{stamp}" if n == 1 else f"{job_name}-{stamp}-{n}")
            try:
                os.mkdir(candidate)
                return RunDir(candidate, (candidate, *missing))
            except FileExistsError:
                continue
    except OSError as exc:
        raise RunDirError(f"cannot create a run directory in {base}: {exc.strerror or exc}") from None
    raise AssertionError("unreachable")  # itertools.count never ends


def preview_run_dir(job_name: str, base: Path | None = None) -> RunDir:
    """The run directory :func:`default_run_dir` would create now, named and not created: what a
    dry run (``render`` or ``submit --dry-run`` without ``--out``) shows, writing nothing."""
    base = check_path(Path(os.path.abspath(base or Path.cwd() / "runs")))
    return RunDir(base / f"{job_name.replace(':', '-')}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")


DEFAULT_BASE_NAME = "clusterkit-runs"


def default_base(site: Site, allocates: bool, cwd: Path | None = None) -> Path | None:
    """Where run directories go without ``--out`` when ``./runs`` would not do: on a site whose
    scheduler grants nodes (``allocates``: Slurm's, whose jobs run on other machines) and whose
    shared storage does not hold the current directory, ``clusterkit-runs`` in the user's
    home directory when that is on shared storage, else in ``<shared path>/<user>``, the first
    that exists and is writable here (a login node).  None: ``./runs`` (the current directory
    is shared, the site is local, or no shared folder of the user's is here, as on a laptop,
    where ``render`` previews and ``submit`` refuses a multi-node job)."""
    if not allocates:
        return None
    cwd = Path(os.path.abspath(cwd or Path.cwd()))
    if site.on_shared_storage(str(cwd)):
        return None
    candidates: list[Path] = []
    home = Path(os.path.expanduser("~"))
    if home.is_absolute() and site.on_shared_storage(str(home)):
        candidates.append(home)
    user = os.environ.get("USER") or os.environ.get("LOGNAME")
    if user and re.fullmatch(r"[A-Za-z0-9._-]+", user) and user not in (".", ".."):
        candidates += [Path(st.path) / user for st in site.shared_storage]
    for folder in candidates:
        if folder.is_dir() and os.access(folder, os.W_OK | os.X_OK):
            return folder / DEFAULT_BASE_NAME
    return None


def resolve_out(out: str | None, job_name: str, *, base: Path | None = None, write: bool = True) -> RunDir:
    """The absolute run directory for ``--out`` (or the default, created under ``base``, else
    ``./runs``), checked before any rendering.  ``write=False`` without ``out``: the default's
    name only, nothing created (:func:`preview_run_dir`)."""
    if not out and not write:
        return preview_run_dir(job_name, base)
    claim = RunDir(Path(out).expanduser()) if out else default_run_dir(job_name, base)
    path = check_path(Path(os.path.abspath(claim.path)))
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise RunDirError(f"{path} already exists and is not empty; choose a new directory", field="out",
                          value=str(out or path))
    parent = path if path.is_dir() else path.parent  # an existing --out is filled in place
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise RunDirError(f"cannot create {path}: {probe} is not a writable directory", field="out",
                          value=str(out or path))
    return replace(claim, path=path)


def write_run_dir(path: Path, artifacts: Mapping[str, str], fill: Callable[[Path], None] | None = None) -> Path:
    """Write every artifact into the empty (or new) directory ``path``; return ``path``.
    ``fill`` adds to the staging folder before anything moves in (the code snapshot's tree).

    On any failure the artifacts written so far are removed, and ``path`` too if this call
    created it.  A name that is not a plain relative path inside ``path`` is refused first.
    """
    path = check_path(Path(os.path.abspath(path)))
    for name in artifacts:   # before anything is made: nothing half-written
        check_artifact_name(name)
    created = _make_dir(path)
    moved: list[Path] = []
    try:
        staging = _claim(path)
        try:
            _write_artifacts(staging, artifacts)
            if fill is not None:
                fill(staging)
            for name in sorted(os.listdir(staging), key=lambda n: n in EXECUTABLE):  # job.sbatch last
                os.rename(staging / name, path / name)
                moved.append(path / name)
            staging.rmdir()
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    except OSError as exc:
        _undo(path, moved, created)
        raise RunDirError(f"cannot write run directory {path}: {exc.strerror or exc}") from None
    except BaseException:
        _undo(path, moved, created)
        raise
    return path


def _make_dir(path: Path) -> bool:
    """Create ``path`` (True), or accept the directory that is already there (False)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path)
        return True
    except FileExistsError:
        if not path.is_dir():
            raise RunDirError(f"cannot create run directory {path}: it exists and is not a directory") from None
        return False
    except OSError as exc:
        raise RunDirError(f"cannot create run directory {path}: {exc.strerror or exc}") from None


def _claim(path: Path) -> Path:
    """The staging directory inside ``path``: made exclusively, so one writer fills ``path``."""
    staging = path / STAGING
    try:
        os.mkdir(staging)
    except FileExistsError:
        raise RunDirError(f"run directory {path} is being written by another clusterkit") from None
    if any(name not in (STAGING, CODE_STAGING) for name in os.listdir(path)):
        staging.rmdir()
        raise RunDirError(f"run directory {path} already exists and is not empty; choose a new directory")
    return staging


_BAD_NAME_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")


def check_artifact_name(name: str) -> str:
    """Refuse an artifact name that is not a plain relative path inside the run directory: no
    absolute path, no empty, '.' or '..' part, no control character or backslash, nothing in
    the staging, ``logs`` or ``code`` folder the writer keeps for itself."""
    parts = name.split("/")
    if (not name or name.startswith("/") or _BAD_NAME_CHARS.search(name)
            or parts[0] in (STAGING, jobfiles.LOGS, CODE_DIR, CODE_STAGING)
            or any(part in ("", ".", "..") or len(os.fsencode(part)) > 255 for part in parts)):
        raise RunDirError(f"artifact name {_short(name)!r}: not a plain relative path inside the run directory")
    return name


def _write_artifacts(staging: Path, artifacts: Mapping[str, str]) -> None:
    mask = _umask()
    for name, text in artifacts.items():
        target = staging / name
        target.parent.mkdir(parents=True, exist_ok=True)   # inside staging, which this writer made
        target.write_text(text, encoding="utf-8")  # created 0666 & ~umask
        if name in EXECUTABLE:
            os.chmod(target, 0o777 & ~mask)
    (staging / jobfiles.LOGS).mkdir()


def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it portably is to set it
    os.umask(mask)
    return mask


def _undo(path: Path, moved: list[Path], created: bool) -> None:
    for entry in moved:
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    if created:
        _remove_empty(path)


def check_job_dirs(run_dir: str, checkpoints: str, run_name: str | None) -> None:
    """Refuse a job whose run directory or checkpoint folders another user could fill: the run
    directory, ``<checkpoints>``, ``<checkpoints>/<you>`` and, with a run name, its folder (those
    that exist here; the job script checks them again, and what it creates, before it starts)."""
    checks = [(Path(run_dir), "run"), (Path(checkpoints), "shared")]
    with contextlib.suppress(KeyError):   # a uid with no name here: the job script (id -un) says so
        mine = Path(checkpoints) / pwd.getpwuid(os.getuid()).pw_name
        checks += [(mine, "own"), *([(mine / run_name, "own")] if run_name else [])]
    for path, kind in checks:
        problem = not_own_dir(path, kind)
        if problem is not None:
            raise RunDirError(f"{problem}: another user could plant what the job loads (checkpoints are "
                              "unpickled: code); see docs/security.md")
