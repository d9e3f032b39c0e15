"""``status --all``'s table: one row per job, fitted to an 80-column terminal (elapsed time,
restarts and reason beside the state; the least useful columns left out first)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from clusterkit.tooltext import parse_iso

COLUMNS = ["JOB", "SITE", "NAME", "STAGE", "LAUNCHER", "NODES", "STATE", "EXIT", "ELAPSED", "RESTARTS", "REASON",
           "SUBMITTED"]
KEYS = ("JOB", "NAME", "NODES", "STATE", "EXIT", "ELAPSED", "SUBMITTED")
DROP = ("LAUNCHER", "STAGE", "SITE", "SUBMITTED", "NODES", "RESTARTS", "REASON")


def elapsed(row: Mapping[str, Any], now: float | None = None) -> str:
    """Since submission: until its end (the result file's time) for a job that ended, until now
    for one that has not; ``-`` when an ended job's end is unknown.  Slurm's format: [D-]H:MM:SS."""
    start = parse_iso(row.get("submitted_at"))
    end = parse_iso(row.get("ended_at")) if row.get("ended_at") else (None if row.get("ended") else now or time.time())
    if start is None or end is None:
        return "-"
    s = max(0, int(end - start))
    days, s = divmod(s, 86400)
    text = f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


def table(rows: Sequence[Mapping[str, Any]], ended: Sequence[bool]) -> tuple[list[str], list[list[Any]]]:
    """The columns and rows, latest first; RESTARTS and REASON only when some job has one."""
    cells = table_rows(rows, ended)
    unused = {name for name in ("RESTARTS", "REASON") if not any(r[COLUMNS.index(name)] for r in cells)}
    keep = [i for i, name in enumerate(COLUMNS) if name not in unused]
    return [COLUMNS[i] for i in keep], [[r[i] for i in keep] for r in cells]


def table_rows(rows: Sequence[Mapping[str, Any]], ended: Sequence[bool]) -> list[list[Any]]:
    """The rows, latest first, every column."""
    out = []
    for r, over in zip(reversed(rows), reversed(ended), strict=True):
        state = r.get("tasks") or (f"{r['state']} (stale)" if r["stale"] else r["state"])
        code = r["exit_code"] if r["exit_code"] is not None else (f"sig {r['signal']}" if r["signal"] else "")
        submitted = r["submitted_at"][:19].replace("T", " ")
        out.append([r["job_id"], r["site"], r["name"], r["stage"], r["launcher"], r["nodes"], state, code,
                    elapsed({**r, "ended": over}), r["restarts"] or "", r["reason"] or "", submitted[5:16]])
    return out
