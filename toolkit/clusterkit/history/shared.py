"""The site's shared history directory (``node_history.shared_dir``): every user's failures, for all.

Admins make the directory (owned by root, and sticky where others may write it, as ``/tmp``:
then a user can create and replace only their own files).  Each user's history of the site is
written there too, as ``<site>@<user>.json``; reading, a file counts only when it is a regular
file owned by the user its name names, and within the store's bounds.  Another user's file
cannot make a node avoided on its own: it counts at most one hardware failure per node within
the window (:func:`clusterkit.history.summary.summarize`), at most :data:`MAX_USERS` files are
read, and a directory that is not admin-owned as above is ignored with one warning line.
"""

from __future__ import annotations

import itertools
import os
import pwd
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.history.store import Event, load

MAX_USERS = 1000          # other users' files read; more are left out, said in a warning
MAX_NAMES = 100_000       # directory entries looked at
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


@dataclass
class Shared:
    """Other users' events from the shared directory, by user name."""

    by_user: dict[str, list[Event]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def me() -> str | None:
    """The name of the user running clusterkit (None where the system has none for the uid)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return None


def own_path(shared_dir: str, site: str) -> Path | None:
    """Where this user's history of ``site`` goes in the shared directory."""
    user = me()
    return Path(shared_dir) / f"{site}@{user}.json" if user and _USER.fullmatch(user) else None


def dir_problem(directory: Path) -> str | None:
    """Why ``directory`` is no admin-owned shared directory, or None when it is one."""
    try:
        st = os.lstat(directory)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory (or is a symbolic link)"
    if st.st_uid != 0:
        return f"is owned by uid {st.st_uid}, not root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        return "is writable by others without the sticky bit (any user could replace any file)"
    return None


def read_others(shared_dir: str, site: str) -> Shared:
    """Every other user's events of ``site`` in ``shared_dir`` (see the module docstring)."""
    directory, out = Path(shared_dir), Shared()
    problem = dir_problem(directory)
    if problem:
        out.warnings.append(f"node history: shared directory {directory} {problem}; ignored")
        return out
    mine = me()
    prefix = f"{site}@"
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in itertools.islice(entries, MAX_NAMES)]
    except OSError as exc:
        out.warnings.append(f"node history: shared directory {directory}: cannot list ({exc.strerror or exc})")
        return out
    users = sorted(n[len(prefix):-5] for n in names if n.startswith(prefix) and n.endswith(".json"))
    users = [u for u in users if _USER.fullmatch(u) and u != mine]
    if len(users) > MAX_USERS:
        out.warnings.append(f"node history: shared directory {directory}: {len(users)} users' files; "
                            f"the first {MAX_USERS} read")
        users = users[:MAX_USERS]
    for user in users:
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            continue   # a name no account has: nobody's file
        loaded = load(directory / f"{prefix}{user}.json", owner_uid=uid)
        out.warnings.extend(loaded.warnings())
        if loaded.events:
            out.by_user[user] = loaded.events
    return out
