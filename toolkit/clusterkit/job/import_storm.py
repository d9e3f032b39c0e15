"""The warning for a Python environment on shared storage at many nodes (``software.import_storm_nodes``).  Pure.

Every rank starts its own Python from the job's ``--venv``/``--conda``: ``import torch`` alone opens
about 2,100 files and makes about 21,000 stat calls per process (torch 2.14, Python 3.11, counted
with ``strace -c``), all answered by the shared file system's metadata server, at once on every rank
of every node.  The ml-engineering book's storage chapter (Stas Bekman, "Storage: File Systems and
IO") measured one cold ``import torch`` at 20 s on an NFS share, 5-10x a local NVMe drive; hundreds of
nodes starting together make it worse.  An image (``software.container``, staged once with
``cache_dir``), a squashfs of the environment, or a copy on each node's local disk reads those files
from the node instead.
"""

from __future__ import annotations

import os

from clusterkit.config.schema import Site
from clusterkit.job.request import JobSetup


def _where(site: Site, path: str) -> str | None:
    """How ``path`` relates to the site's storage: 'is on shared storage', 'may be on shared storage'
    (no listed storage holds it), or None (on storage the site lists as node-local)."""
    if not os.path.isabs(path) or site.on_shared_storage(path):
        return "is on shared storage" if os.path.isabs(path) else "may be on shared storage (a relative path)"
    path = os.path.normpath(path)
    local = any(path == os.path.normpath(st.path) or path.startswith(os.path.normpath(st.path).rstrip("/") + "/")
                for st in site.storage if not st.is_shared)
    return None if local else "may be on shared storage (no storage the site lists holds it)"


def warning(site: Site, job: JobSetup, nnodes: int, allocates: bool) -> list[str]:
    """One warning when the job's venv or conda environment is (or may be) on shared storage and
    the job has more nodes than the site's ``software.import_storm_nodes`` (``allocates``: the
    site's scheduler grants nodes; a local site is one machine)."""
    limit = site.software.import_storm_nodes
    if nnodes <= limit or not allocates:
        return []
    if job.venv:
        what, where = f"--venv {job.venv}", _where(site, job.venv)
    elif job.conda:
        what = f"--conda {job.conda}"
        where = _where(site, job.conda) if "/" in job.conda else "may be on shared storage (a named environment)"
    else:
        return []
    if where is None:
        return []
    return [f"{what} {where}, and this job has {nnodes} nodes (software.import_storm_nodes: {limit}): every "
            "rank's Python opens its files at once (`import torch`: about 2,000 files each), all through the "
            "file system's metadata server; use an image (software.container, staged once with cache_dir), a "
            "squashfs of the environment, or a copy on each node's local disk (see docs/admin.md)"]
