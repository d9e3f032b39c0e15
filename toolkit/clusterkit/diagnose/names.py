"""Which log files to read, and what clusterkit's log file names say (restart, node, rank)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from clusterkit.hostlist import is_host

# <job>.r<restart>.<node or rankN>.out, as clusterkit's job script names srun's logs; a relaunch
# inside the allocation adds its attempt: <job>.r<restart>.a<attempt>.<node or rankN>.out
_NAME = re.compile(r"^(?P<job>\d+)\.r(?P<restart>\d{1,9})\.(?:a\d{1,6}\.)?(?P<who>.+)\.(?:out|err|log)$")
_OLD_NAME = re.compile(r"^(?P<job>\d+)\.(?P<who>[^.]+)\.(?:out|err|log)$")
# nccl-<job>.r<restart>.<host>.<pid>.log: NCCL_DEBUG_FILE as clusterkit's --debug names it
_NCCL_NAME = re.compile(r"^nccl-(?P<job>\d+)\.r(?P<restart>\d+)\.(?P<who>.+)\.\d+\.log$")
# torchrun-<job>.r<restart>/<node>/...: torchrun's --log-dir as clusterkit sets it (its per-rank copies)
_TORCHRUN_DIR = re.compile(r"^torchrun-(?P<job>\d+)\.r(?P<restart>\d{1,9})$")
# <job>_<task>_log.out: a local job's one log (the whole job on one host)
_LOCAL_NAME = re.compile(r"^(?P<job>\d+)_\d+_log\.(?:out|err)$")


def name_facts(path: Path) -> tuple[int | None, str | None, int | None]:
    """(restart, node, rank) that clusterkit's log names carry: ``123.r1.node4.out``, ``123.r0.rank5.out``,
    ``nccl-123.r0.node4.5678.log`` (``--debug``'s NCCL log of one process), and the folders of torchrun's
    per-rank files (``torchrun-123.r1/node4/.../stdout.log``)."""
    m = _NCCL_NAME.match(path.name) or _NAME.match(path.name) or _OLD_NAME.match(path.name)
    if not m:   # a file in torchrun's per-rank folders: its folders name the restart and node
        copy = _copy_of(path)
        return (copy[1], copy[2], None) if copy else (None, None, None)
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


def _copy_of(path: Path) -> tuple[str, int, str] | None:
    """(job, restart, node) of a file in torchrun's per-rank folders
    (``torchrun-<job>.r<restart>/<node>/<run>/attempt_<n>/<local rank>/stdout.log``), else None."""
    parts = path.parts[:-1]
    for i in range(len(parts) - 2, -1, -1):   # the innermost such folder, with a node folder below it
        m = _TORCHRUN_DIR.match(parts[i])
        if m and is_host(parts[i + 1]):   # a folder name is data: a node only where it is a host name
            return m.group("job"), int(m.group("restart")), parts[i + 1]
    return None


def without_copies(files: list[Path]) -> tuple[list[Path], int]:
    """``files`` less torchrun's per-rank copies whose node log is among them, and how many were left
    out.  torchrun's ``--tee`` writes every line of a rank both to the node's log (through srun) and
    to the rank's own file: read both and each line counts twice.  The node log is kept (it also holds
    torchrun's own lines); a rank's copy is read only where no node log of its job, restart and node
    is there (a folder given alone, a node log lost)."""
    nodes: set[tuple[str, int, str]] = set()
    local: set[str] = set()
    for p in files:
        restart, node, _ = name_facts(p)
        m = _NAME.match(p.name)
        if m and node is not None and restart is not None:
            nodes.add((m.group("job"), restart, node))
        lm = _LOCAL_NAME.match(p.name)
        if lm:
            local.add(lm.group("job"))
    kept = [p for p in files
            if (c := _copy_of(p)) is None or (c not in nodes and c[0] not in local)]
    return kept, len(files) - len(kept)
