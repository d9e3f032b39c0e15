"""PyTorch flight-recorder dumps: which rank is behind, and in which collective.

Every clusterkit job keeps torch's flight recorder on and points its dumps at the run's logs
(``logs/fr-<job>.r<restart>.rank<N>``; torch's own default name, ``nccl_trace_rank_<N>``, is
read too, for dumps collected by hand).  On a collective timeout each rank writes its recorder:
a pickled dict whose ``entries`` list the last collectives of every process group
(``collective_seq_id``, ``profiling_name`` such as ``nccl:all_reduce``, ``state``).

A dump is a file others wrote: it is read as a regular file, at most :data:`MAX_BYTES`, and
unpickled with every global refused, so only plain data (dicts, lists, strings, numbers) can
come out of it, never an object or a call, within bounds of opcodes, expansion and time
(:mod:`clusterkit.diagnose.flight_pickle`).  Its fields are checked before use.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterkit import jobfiles
from clusterkit.diagnose import flight_pickle
from clusterkit.safefile import is_real_dir, is_regular_file, read_capped
from clusterkit.tooltext import printable

#: The largest dump read (2,000 entries per group with stacks are a few MiB).
MAX_BYTES = 64 << 20
#: Entries read per dump.
MAX_ENTRIES = 200_000
_OURS = re.compile(r"^fr-(?P<job>\d+)\.r(?P<restart>\d+)\.rank(?P<rank>\d+)$")
_TORCH = re.compile(r"^nccl_trace_rank_(?P<rank>\d+)$")


def name_facts(path: Path) -> tuple[str | None, int, int] | None:
    """(job, restart, rank) a dump's name carries; None for a file that is not a dump."""
    m = _OURS.match(path.name)
    if m:
        return m.group("job"), int(m.group("restart")), int(m.group("rank"))
    m = _TORCH.match(path.name)
    return (None, 0, int(m.group("rank"))) if m else None


def is_dump(path: Path) -> bool:
    return name_facts(path) is not None


def job_dumps(run_dir: Path, job_id: str) -> list[Path]:
    """The job's dumps in ``run_dir/logs`` (regular files only, as for its logs)."""
    logs = jobfiles.logs(run_dir)
    if not is_real_dir(logs):
        return []
    found = []
    for p in logs.iterdir():
        facts = name_facts(p)
        if facts is not None and facts[0] == job_id and is_regular_file(p):
            found.append(p)
    return sorted(found, key=lambda p: (name_facts(p) or ("", 0, 0))[1:])


@dataclass(frozen=True)
class Collective:
    seq: int
    op: str
    state: str


@dataclass(frozen=True)
class Dump:
    """One rank's recorder: its last collective per process group."""

    rank: int
    restart: int
    last: dict[str, Collective]


def _text(v: Any, limit: int = 120) -> str:
    """A scalar field as one bounded line; a container or a huge number is not expanded."""
    if isinstance(v, str):
        return printable(v[: limit * 4])[:limit]
    if isinstance(v, (int, float)) and not (isinstance(v, int) and v.bit_length() > 64):
        return str(v)[:limit]
    return f"<{type(v).__name__}>"


def _group(entry: dict[str, Any]) -> str:
    pg = entry.get("process_group")
    if isinstance(pg, list | tuple) and pg and all(isinstance(x, str) for x in pg):
        return _text(pg[-1] if len(pg) > 1 and pg[-1] else pg[0], 80)
    return _text(entry.get("pg_id", "?"), 80)


def read_dump(path: Path) -> Dump | str:
    """The dump at ``path``, or why it cannot be read (one line)."""
    facts = name_facts(path)
    if facts is None:
        return f"{path}: not a flight-recorder dump name"
    _, restart, rank = facts
    try:
        data, more = read_capped(path, MAX_BYTES, follow_symlinks=False)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if more:
        return f"{path}: larger than {MAX_BYTES >> 20} MiB, not read"
    try:
        obj = flight_pickle.load(data)
    except Exception as exc:  # any malformed pickle is one unreadable dump
        return f"{path}: not a flight-recorder dump ({_text(str(exc), 100)})"
    entries = obj.get("entries") if isinstance(obj, dict) else None
    if not isinstance(entries, list):
        return f"{path}: not a flight-recorder dump (no entries list)"
    last: dict[str, Collective] = {}
    for e in entries[:MAX_ENTRIES]:
        if not isinstance(e, dict) or e.get("is_p2p") is True:
            continue
        seq = e.get("collective_seq_id")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            continue
        group = _group(e)
        if group not in last or seq >= last[group].seq:
            last[group] = Collective(seq, _text(e.get("profiling_name", "?"), 80), _text(e.get("state", "?"), 20))
    return Dump(rank, restart, last)


def _ranks(ranks: list[int]) -> str:
    shown = ",".join(map(str, ranks[:16]))
    return ("rank " if len(ranks) == 1 else "ranks ") + shown + (f",... ({len(ranks)})" if len(ranks) > 16 else "")


def findings(dumps: list[Dump]) -> list[dict[str, Any]]:
    """Per restart and process group: the ranks behind (the lowest last collective) and where
    the others wait, or ops that differ at one sequence number.  Groups in step say nothing."""
    by: dict[tuple[int, str], dict[int, Collective]] = defaultdict(dict)
    for d in dumps:
        for group, c in d.last.items():
            by[(d.restart, group)][d.rank] = c
    out: list[dict[str, Any]] = []
    for (restart, group), per_rank in sorted(by.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
        low = min(c.seq for c in per_rank.values())
        high = max(c.seq for c in per_rank.values())
        if low < high:
            behind = sorted(r for r, c in per_rank.items() if c.seq == low)
            ahead = sorted(r for r, c in per_rank.items() if c.seq == high)
            at, wait = per_rank[behind[0]], per_rank[ahead[0]]
            out.append({
                "restart": restart, "group": group, "kind": "behind", "ranks": behind, "seq": at.seq, "op": at.op,
                "waiting": ahead, "waiting_seq": wait.seq, "waiting_op": wait.op,
                "summary": f"{_ranks(behind)} behind in process group {group}: last collective #{at.seq} "
                           f"{at.op}, while {_ranks(ahead)} waited in #{wait.seq} {wait.op} ({wait.state})",
            })
            continue
        ops = sorted({c.op for c in per_rank.values()})
        if len(ops) > 1:
            out.append({
                "restart": restart, "group": group, "kind": "mismatch", "ranks": sorted(per_rank), "seq": low,
                "op": " vs ".join(ops),
                "summary": f"process group {group}: collective #{low} differs between ranks ({', '.join(ops)}): "
                           "the ranks called different collectives",
            })
    return out


def read(paths: list[Path]) -> dict[str, Any]:
    """The report section for the dumps among ``paths``: files read, findings, unreadable ones."""
    dumps: list[Dump] = []
    unreadable: list[str] = []
    for p in paths:
        got = read_dump(p)
        if isinstance(got, Dump):
            dumps.append(got)
        else:
            unreadable.append(got)
    return {"dumps": len(dumps), "ranks": sorted({d.rank for d in dumps}), "findings": findings(dumps),
            "unreadable": unreadable}
