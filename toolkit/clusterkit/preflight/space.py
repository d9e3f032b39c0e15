"""The free space and inodes of the file system a directory lives on (``os.statvfs``), for the
checkpoint capacity check (:mod:`clusterkit.job.checkpoint`).  A directory not made yet (the
run's checkpoint directory before its first job) is judged by its nearest existing parent, never
above ``root`` (the site's storage path): storage not mounted on this machine is not judged by the
disk it would sit on."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clusterkit.config.schema import Site
    from clusterkit.job.checkpoint import Capacity


def free(path: str, root: str | None = None) -> tuple[int, int, str] | str:
    """(free bytes, free inodes, the directory measured) for an unprivileged user; or why not."""
    p = Path(path).expanduser().absolute()
    top = Path(root).expanduser().absolute() if root else Path(p.anchor)
    if not top.is_dir():
        return f"{top} is not on this machine"
    while not p.exists() and p != top and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError as exc:
        return f"statvfs {p}: {exc.strerror or exc}"
    # f_favail is 0 on file systems without an inode limit of their own answer (some report 0 total)
    inodes = st.f_favail if st.f_files > 0 else 2**62
    return st.f_bavail * st.f_frsize, inodes, str(p)


def here(site: Site, params: int, gpus: int, keep: int) -> Capacity:
    """``plan``'s verdict: ``keep`` checkpoints of ``params`` parameters saved by ``gpus`` ranks
    against the site's checkpoint directory as mounted on this machine."""
    from clusterkit.job.checkpoint import judge
    from clusterkit.job.plan import checkpoint_base

    path = checkpoint_base(site, os.path.join(os.getcwd(), "runs", "run"))
    got = free(path, os.path.dirname(path.rstrip("/")))
    if isinstance(got, str):
        return judge(path, params, gpus, keep, None, None, got)
    return judge(path, params, gpus, keep, got[0], got[1])
