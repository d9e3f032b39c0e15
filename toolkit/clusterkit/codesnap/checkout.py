"""On the login node: the code a laptop uploaded, made into a tree a submit snapshots
(docs/laptop.md).

The laptop writes, over SFTP, into ``~/.clusterkit/upload`` of the login node's user:
``objects/<2 hex>/<sha256>`` (``.x`` for an executable file), read-only, each renamed into place
once its bytes hashed to its name, and ``trees/<tree>.json``, the snapshot's manifest and the
working directory the command runs in.  :func:`checkout` checks the manifest (its files' list
hashes to ``<tree>``, every path relative and inside the tree), checks every object (a regular
file of the user's, read-only, whose content hashes to its name) and makes
``checkouts/<tree>`` of hard links to them, once; ``submit --code-upload TREE`` then snapshots that
folder as it snapshots ``--code DIR``.  Folders must be the user's alone, as the store's.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import secrets
import shutil
from pathlib import Path
from typing import Any

from clusterkit.codesnap import store
from clusterkit.errors import ExitCode, SnapshotError
from clusterkit.safefile import NotRegular, not_own_dir, read_capped

UPLOAD_DIR = ".clusterkit/upload"     # relative to the login node user's home folder
_MANIFEST_MAX = 64 << 20
_TREE = re.compile(r"[0-9a-f]{64}")


def tree_manifest(entries: list[tuple[str, str, bool]], workdir: str) -> tuple[str, bytes]:
    """The tree's name (as :func:`clusterkit.codesnap.take` names it) and the uploaded manifest."""
    listed = json.dumps({"version": 1, "files": entries}, separators=(",", ":")).encode()
    tree = hashlib.sha256(listed).hexdigest()
    doc = {"version": 1, "files": entries, "workdir": workdir}
    return tree, json.dumps(doc, separators=(",", ":")).encode()


def _fail(message: str, code: ExitCode = ExitCode.FAILURE) -> SnapshotError:
    return SnapshotError(f"uploaded code: {message}", exit_code=code)


def _read_manifest(root: Path, tree: str) -> tuple[list[tuple[str, str, bool]], str]:
    path = root / "trees" / f"{tree}.json"
    try:
        raw, cut = read_capped(path, _MANIFEST_MAX)
        data: Any = json.loads(raw.decode("utf-8")) if not cut else None
    except NotRegular:
        raise _fail(f"{path} is not a regular file") from None
    except FileNotFoundError:
        raise _fail(f"no upload {tree[:12]} in {root} (submit from the laptop again)", ExitCode.USAGE) from None
    except OSError as exc:
        raise _fail(f"cannot read {path} ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        data = None
    files = data.get("files") if isinstance(data, dict) else None
    workdir = data.get("workdir") if isinstance(data, dict) else None
    if not isinstance(files, list) or not isinstance(workdir, str):
        raise _fail(f"{path} is not a manifest clusterkit wrote")
    entries: list[tuple[str, str, bool]] = []
    for item in files:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and isinstance(item[1], str)
                and isinstance(item[2], bool) and re.fullmatch(r"[0-9a-f]{64}", item[1]) and _inside(item[0])):
            raise _fail(f"{path}: an entry that is not (relative path, sha256, executable): {str(item)[:80]}")
        entries.append((item[0], item[1], item[2]))
    if workdir and not _inside(workdir):
        raise _fail(f"{path}: working directory {workdir[:80]!r} is not inside the tree")
    if tree_manifest(entries, workdir)[0] != tree:
        raise _fail(f"{path}: its files do not hash to the tree's name {tree[:12]}")
    return entries, workdir


def _inside(rel: str) -> bool:
    return (bool(rel) and not rel.startswith("/") and "\0" not in rel and posixpath.normpath(rel) == rel
            and ".." not in rel.split("/"))


def _check_object(objects: Path, sha: str, executable: bool) -> None:
    obj = store.object_path(objects, sha, executable)
    if not store._usable(obj):
        raise _fail(f"object {obj} is missing, not a regular file of yours, or writable (submit from the laptop again)")
    try:
        got, _, _ = store.hash_file(obj, 1 << 62)
    except OSError as exc:
        raise _fail(f"cannot read {obj} ({exc.strerror or exc})") from None
    if got != sha:
        raise _fail(f"object {obj} does not hash to its name (remove it and submit from the laptop again)")


def checkout(tree: str, home: Path | None = None) -> tuple[Path, str]:
    """The folder holding uploaded tree ``tree`` (made once) and the working directory inside it."""
    if not _TREE.fullmatch(tree):
        raise _fail(f"{tree[:80]!r} is not a tree's name (64 hex digits)", ExitCode.USAGE)
    root = (home or Path.home()) / UPLOAD_DIR
    for folder in (root, root / "objects", root / "trees"):
        problem = not_own_dir(folder, "own")
        if problem:
            raise _fail(f"{problem}: another user could plant the code your jobs run")
    entries, workdir = _read_manifest(root, tree)
    final = root / "checkouts" / tree
    if final.is_dir() and not final.is_symlink():
        return final, workdir
    for _, sha, executable in {(e[1], e[1], e[2]) for e in entries}:
        _check_object(root / "objects", sha, executable)
    try:
        os.makedirs(root / "checkouts", 0o700, exist_ok=True)
        tmp = root / "checkouts" / f".tmp-{secrets.token_hex(8)}"
        store.materialise(root / "objects", entries, tmp)
        try:
            os.rename(tmp, final)
        except OSError:   # another submit made it first: theirs is the same tree
            shutil.rmtree(tmp, ignore_errors=True)
            if not final.is_dir():
                raise
    except OSError as exc:
        raise _fail(f"cannot make {final} ({exc.strerror or exc})") from None
    return final, workdir
