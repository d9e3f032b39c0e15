"""The site's container image staged once per job (``software.container.cache_dir``).  Pure.

Without a cache, pyxis imports a registry image (``nvcr.io#nvidia/pytorch:...``) on every node at
every step, restarts included: hundreds of nodes pull the same layers from the registry at once.
With one, the job script (``templates/job-image.sbatch.j2``) makes a squashfs (``enroot import
-o``) or a SIF (``apptainer build``) once, on the batch host, on shared storage, unless it is there
already; every step then names that file (``$CK_IMAGE``), and pyxis steps a job-scoped container
(``--container-name``), which pyxis creates once per node on the first step that names it and
reuses on every later step of the job (the relaunches of recovery too).  A staged file is keyed by
the image's text: a tag pushed again is not fetched again (pin images by digest, or remove the file).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from clusterkit.config.software import Container
from clusterkit.job.templating import shell_quote

#: the shell variable (exported: apptainer's launch body expands it on each node) naming the staged file
IMAGE_VAR = "CK_IMAGE"
#: pyxis's container name for a staged image when the site names none: one per job (an array task is a job)
JOB_NAME = 'ck-"$SLURM_JOB_ID"'

_URI = re.compile(r"[a-z][a-z0-9+.-]*://")


@dataclass(frozen=True)
class Staged:
    """How the job script stages the image: the tool's argv prefix (output path and source follow),
    the source as the tool reads it, the file's name in the cache and its folder."""

    tool: tuple[str, ...]
    source: str
    file: str
    cache_dir: str


def key(image: str, suffix: str) -> str:
    """A file name for the image: readable (the image's text, other characters as '_') and unique
    (a sha256 prefix of the whole text), so two images never share a file."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", image).strip("._-")[:80] or "image"
    return f"{readable}-{hashlib.sha256(image.encode()).hexdigest()[:16]}{suffix}"


def staged(container: Container | None) -> Staged | None:
    """How ``container``'s image is staged, or None (no cache, or the image is already a file)."""
    if container is None or container.cache_dir is None:
        return None
    image = container.image
    if container.runtime == "pyxis":
        if image.startswith(("/", "./", "../")) or (image.endswith((".sqsh", ".squashfs")) and "#" not in image):
            return None   # a squashfs already: pyxis reads it as is
        source = image if _URI.match(image) else "docker://" + image   # enroot's URI for pyxis's image text
        return Staged(("enroot", "import", "-o"), source, key(image, ".sqsh"), container.cache_dir)
    if not _URI.match(image):
        return None       # a SIF or sandbox path
    return Staged((container.runtime, "build"), image, key(image, ".sif"), container.cache_dir)


def container_name(container: Container) -> str | None:
    """pyxis's ``--container-name`` word (shell): the site's, else a job-scoped one for a staged
    image (a site-wide fixed name under pyxis's default global scope would reuse another job's
    container, of another image); None without a cache (each step's container, as before)."""
    if container.name:
        return shell_quote(container.name)
    return JOB_NAME if staged(container) is not None else None
