"""Which log files to read, and what clusterkit's log file names say (restart, node, rank)."""

from __future__ import annotations

import os
import re
from pathlib import Path

# <job>.r<restart>.<node or rankN>.out, as clusterkit's job script names srun's logs; a relaunch
# inside the allocation adds its attempt: <job>.r<restart>.a<attempt>.<node or rankN>.out
_NAME = re.compile(r"^(?P<job>\d+)\.r(?P<restart>\d{1,9})\.(?:a\d{1,6}\.)?(?P<who>.+)\.(?:out|err|log)$")
_OLD_NAME = re.compile(r"^(?P<job>\d+)\.(?P<who>[^.]+)\.(?:out|err|log)$")
# nccl-<job>.r<restart>.<host>.<pid>.log: NCCL_DEBUG_FILE as clusterkit's --debug names it
_NCCL_NAME = re.compile(r"^nccl-(?P<job>\d+)\.r(?P<restart>\d+)\.(?P<who>.+)\.\d+\.log$")


def name_facts(path: Path) -> tuple[int | None, str | None, int | None]:
    """(restart, node, rank) that clusterkit's log names carry: ``123.r1.node4.out``, ``123.r0.rank5.out``,
    ``nccl-123.r0.node4.5678.log`` (``--debug``'s NCCL log of one process)."""
    m = _NCCL_NAME.match(path.name) or _NAME.match(path.name) or _OLD_NAME.match(path.name)
    if not m:
        return None, None, None
    restart = int(m.group("restart")) if "restart" in m.groupdict() and m.group("restart") else None
    who = m.group("who")
    rm = re.fullmatch(r"rank(\d{1,9})", who)
    if rm:
        return restart, None, int(rm.group(1))
    return restart, who, None


def expand(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """Files to read (directories walked, sorted) and a message for each path that is not there."""
    files: list[Path] = []
    missing: list[str] = []
    for p in paths:
        if p.is_dir():
            for root, dirs, names in os.walk(p):
                dirs.sort()
                files += [Path(root) / n for n in sorted(names) if not n.startswith(".")]
        elif p.exists():
            files.append(p)
        else:
            missing.append(f"{p}: no such file or directory")
    return files, missing
