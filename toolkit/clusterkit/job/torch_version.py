"""The torch a job's ``--venv`` / ``--conda`` environment holds, read on the submit host.

Only where it can be known there: the environment's ``lib/python3.*/site-packages/torch-*.dist-info``
(a venv's and a conda environment's layout), its ``METADATA`` read capped and its ``Version:`` line
checked.  Nothing is known (None) without such an environment, where it is not readable here
(another mount on the nodes, a container's own torch), or where it holds two different torches.
"""

from __future__ import annotations

import re
from pathlib import Path

from clusterkit.safefile import read_capped
from clusterkit.tooltext import decode

METADATA_MAX_BYTES = 64 << 10
_VERSION = re.compile(r"^Version: ([0-9]{1,4}\.[0-9]{1,4}[0-9A-Za-z.+_-]{0,60})[ \t]*$", re.MULTILINE)
_FOUND_MAX = 8  # dist-info folders looked at, at most


def installed(prefix: str | None) -> str | None:
    """``2.3.1+cu121`` for the one torch under ``prefix``; None when none, several, or unreadable."""
    if not prefix:
        return None
    found: set[str] = set()
    try:
        infos = sorted(Path(prefix).glob("lib/python3*/site-packages/torch-*.dist-info/METADATA"))[:_FOUND_MAX]
        for meta in infos:
            m = _VERSION.search(decode(read_capped(meta, METADATA_MAX_BYTES)[0]))
            if m:
                found.add(m.group(1))
    except (OSError, ValueError):
        return None
    return found.pop() if len(found) == 1 else None


def below(version: str, floor: tuple[int, int]) -> bool:
    """Whether ``version``'s major.minor is below ``floor`` (``2.3.1+cu121`` < (2, 4))."""
    major, minor = (int(x) for x in re.findall(r"[0-9]+", version)[:2])
    return (major, minor) < floor
