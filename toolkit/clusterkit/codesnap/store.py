"""The content-addressed store of snapshot files, and the job's tree made from it.

On a site with shared storage the store is the user's own folder there,
``<shared path>/<user>/.clusterkit/code``: ``objects/<2 hex>/<sha256>`` (``.x`` for an executable
file), each written to a new temporary name (``O_EXCL | O_NOFOLLOW``), synced and linked into
place, read-only, so a file is stored once however many jobs run it; ``trees/<tree>.json`` is each
snapshot's manifest.  Its folders must be yours alone, as checkpoint folders must
(:func:`clusterkit.safefile.not_own_dir`): a file another user planted there is code a job runs.

A job's tree (``<run dir>/code``) is made of hard links to the objects (copies where the run
directory is on another file system), so changing the working tree after ``submit`` changes
nothing the job reads, and the tree's files are read-only.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import pwd
import secrets
import shutil
import stat
from pathlib import Path

from clusterkit.config.schema import Site
from clusterkit.errors import ExitCode, SnapshotError
from clusterkit.safefile import not_own_dir, open_regular

_CHUNK = 1 << 20
_IN_MEMORY = 64 << 20   # a file up to this is read once into memory; a larger one streams to a temporary object


class TooBig(Exception):
    """The snapshot's byte budget ran out while reading this file."""


def _fail(message: str) -> SnapshotError:
    return SnapshotError(message, exit_code=ExitCode.FAILURE)


def shared_store(site: Site, run_dir: Path) -> Path | None:
    """The user's store on the site's shared storage (the storage holding the run directory first,
    so its tree can be hard links), or None: no ``<shared path>/<user>`` folder here."""
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return None
    storages = sorted(site.shared_storage, key=lambda st: not str(run_dir).startswith(st.path.rstrip("/") + "/"))
    for st in storages:
        mine = Path(st.path) / user
        if mine.is_dir() and os.access(mine, os.W_OK | os.X_OK):
            return mine / ".clusterkit" / "code"
    return None


def open_store(root: Path) -> Path:
    """Make the store's folders (0700) where missing and check every one is yours alone (the
    shared path above them as checkpoints' is: root's or yours, sticky where others may write);
    return its ``objects`` folder."""
    user_dir = root.parent.parent
    problems = [not_own_dir(user_dir.parent, "shared"), not_own_dir(user_dir, "own")]
    for folder in (root.parent, root, root / "objects", root / "trees"):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise _fail(f"code store {root}: cannot create {folder} ({exc.strerror or exc})") from None
        problems.append(not_own_dir(folder, "own"))
    problem = next((p for p in problems if p), None)
    if problem:
        raise _fail(f"code store: {problem}: another user could plant the code your jobs run; see docs/security.md")
    return root / "objects"


def object_path(objects: Path, sha: str, executable: bool) -> Path:
    return objects / sha[:2] / (sha + (".x" if executable else ""))


def hash_file(path: Path, budget: int) -> tuple[str, int, bytes | None]:
    """sha256 and size of the regular file ``path`` (at most ``budget`` bytes), and its bytes when
    small enough to keep in memory (None: read it again to store it)."""
    digest = hashlib.sha256()
    kept: list[bytes] | None = []
    size = 0
    with open_regular(path) as fh:
        while chunk := fh.read(_CHUNK):
            size += len(chunk)
            if size > budget:
                raise TooBig(path)
            digest.update(chunk)
            if kept is not None:
                kept.append(chunk)
                if size > _IN_MEMORY:
                    kept = None
    return digest.hexdigest(), size, b"".join(kept) if kept is not None else None


def store_object(objects: Path, path: Path, sha: str, executable: bool, data: bytes | None) -> bool:
    """Put ``path``'s content (``data`` when read already) in the store as ``sha``; False when the
    store holds it already.  A file that changed since it was hashed is an error: run again."""
    final = object_path(objects, sha, executable)
    if _usable(final):
        return False
    with contextlib.suppress(FileExistsError):
        os.mkdir(final.parent, 0o700)
    tmp = final.parent / f".tmp-{secrets.token_hex(8)}"
    digest = hashlib.sha256()
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
        with os.fdopen(fd, "wb") as out:
            if data is not None:
                out.write(data)
                digest.update(data)
            else:
                with open_regular(path) as fh:
                    while chunk := fh.read(_CHUNK):
                        out.write(chunk)
                        digest.update(chunk)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != sha:
            raise SnapshotError(f"code snapshot: {path} changed while it was read; submit again")
        os.chmod(tmp, 0o555 if executable else 0o444)
        os.replace(tmp, final)
    except OSError as exc:
        raise _fail(f"code store: cannot write {final} ({exc.strerror or exc})") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return True


def _usable(obj: Path) -> bool:
    """Whether ``obj`` is a stored object a job may link to: a regular file of yours, read-only."""
    try:
        st = os.lstat(obj)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o222


def write_tree(root: Path, tree: str, manifest: bytes) -> None:
    """The snapshot's manifest as ``trees/<tree>.json`` (once: the name is its content's hash)."""
    from clusterkit.safefile import write_atomic

    final = root / "trees" / f"{tree}.json"
    if not final.exists():
        try:
            write_atomic(final, manifest, 0o444)
        except OSError as exc:
            raise _fail(f"code store: cannot write {final} ({exc.strerror or exc})") from None


def materialise(objects: Path, entries: list[tuple[str, str, bool]], dest: Path) -> None:
    """The job's tree at ``dest`` (new): each file a hard link to its object, or a copy of it
    where linking is not possible (another file system), read-only."""
    os.mkdir(dest)
    made: set[Path] = {dest}
    for rel, sha, executable in entries:
        target = dest / rel
        parent = target.parent
        if parent not in made:
            parent.mkdir(parents=True, exist_ok=True)
            made.add(parent)
        src = object_path(objects, sha, executable)
        try:
            os.link(src, target)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EMLINK, errno.EPERM, errno.ENOTSUP):
                raise
            shutil.copyfile(src, target)
            os.chmod(target, 0o555 if executable else 0o444)
