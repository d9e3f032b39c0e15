"""The job's record of its attempts inside one allocation: ``logs/attempts-<job>.r<restart>.json``.

The supervisor writes it whole after each failed attempt it judged (the nodes it ran on, its
status, doctor's verdict, the nodes dropped and why, what followed); ``clusterkit status``
shows it, and ``submit --exclude-from`` and a chain's next member keep the dropped nodes out.
It lies in a run directory others may reach, so it is read back as data: within a byte budget,
a regular file (no link), every field checked, host names by :func:`clusterkit.hostlist.check_host`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from clusterkit import jobfiles
from clusterkit.hostlist import HostlistError, check_host
from clusterkit.safefile import NotRegular, is_real_dir, read_capped, write_atomic
from clusterkit.tooltext import decode, load_json, printable
from clusterkit.vocab import is_job_id

VERSION = 1
MAX_BYTES = 1 << 20
MAX_ATTEMPTS = 1000
_TEXT = 400


@dataclass(frozen=True)
class Attempt:
    """One launch inside the allocation that ended in a failure the supervisor judged."""

    attempt: int
    nodes: tuple[str, ...]
    status: int
    verdict: str                          # doctor's category and summary
    dropped: tuple[tuple[str, str], ...]  # (host, why)
    then: str                             # relaunch, requeue or stop
    ended: float | None = None            # when it ended (unix seconds, the batch host's clock)


def path_for(run_dir: str | Path, job_id: str, restart: int) -> Path:
    return jobfiles.ATTEMPTS.path(run_dir, job_id, restart)


def write(run_dir: str | Path, job_id: str, restart: int, done: list[Attempt]) -> None:
    """The record of this run's attempts so far, whole or not at all."""
    data = {"version": VERSION, "job_id": job_id, "restart": restart,
            "attempts": [{**asdict(a), "nodes": list(a.nodes), "dropped": [{"host": h, "why": w} for h, w in a.dropped]}
                         for a in done]}
    write_atomic(path_for(run_dir, job_id, restart), (json.dumps(data, indent=2) + "\n").encode())


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError("expected text")
    return printable(v)[:_TEXT]


def _count(v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 1_000_000:
        raise ValueError("expected a count")
    return v


def _one(d: Any) -> Attempt:
    if not isinstance(d, dict) or not isinstance(d.get("nodes"), list) or not isinstance(d.get("dropped"), list):
        raise ValueError("not an attempt (nodes and dropped lists)")
    if d.get("then") not in ("relaunch", "requeue", "stop"):
        raise ValueError("'then' is not relaunch, requeue or stop")
    nodes = tuple(check_host(_text(h)) for h in d["nodes"][:100_000])
    dropped = tuple((check_host(_text(x["host"])), _text(x["why"])) for x in d["dropped"][:100_000]
                    if isinstance(x, dict))
    status = d.get("status")
    if not isinstance(status, int) or isinstance(status, bool) or not 0 <= status <= 255:
        raise ValueError("status is not 0 to 255")
    ended = d.get("ended")
    if ended is not None and (not isinstance(ended, (int, float)) or isinstance(ended, bool)
                              or not 0 <= ended < 1e11):
        raise ValueError("ended is not a time")
    return Attempt(_count(d["attempt"]), nodes, status, _text(d["verdict"]), dropped, d["then"],
                   None if ended is None else float(ended))


def read(run_dir: str | Path, job_id: str) -> list[tuple[int, Attempt]]:
    """(restart, attempt) for every attempt recorded for ``job_id``, in order; a file that is not
    a valid record of this job and restart, or an attempt that is not valid, is skipped."""
    return read_noted(run_dir, job_id)[0]


def read_noted(run_dir: str | Path, job_id: str) -> tuple[list[tuple[int, Attempt]], list[str]]:
    """:func:`read`, with one line per file or attempt skipped (naming the file, printable)."""
    logs = jobfiles.logs(run_dir)
    if not is_job_id(job_id) or not is_real_dir(logs):
        return [], []
    pattern = jobfiles.ATTEMPTS.restarts(job_id)
    try:
        names = sorted((int(m.group(1)), n) for n in [p.name for p in logs.iterdir()][:100_000]
                       if (m := pattern.fullmatch(n)))
    except OSError:
        return [], []
    out: list[tuple[int, Attempt]] = []
    notes: list[str] = []
    for restart, name in names:
        try:
            raw, more = read_capped(logs / name, MAX_BYTES, follow_symlinks=False)
            if more:
                raise ValueError(f"larger than {MAX_BYTES >> 20} MiB")
            data = load_json(decode(raw))
            if not isinstance(data, dict) or data.get("version") != VERSION or data.get("job_id") != job_id \
                    or data.get("restart") != restart or not isinstance(data.get("attempts"), list):
                raise ValueError(f"not a record of attempts of job {job_id}, restart {restart} (version {VERSION})")
        except (OSError, ValueError) as exc:
            notes.append(f"{name}: {_why(exc)}; skipped")
            continue
        for i, d in enumerate(data["attempts"][:MAX_ATTEMPTS]):
            try:
                out.append((restart, _one(d)))
            except (ValueError, KeyError, TypeError, HostlistError) as exc:
                notes.append(f"{name}: attempt entry {i}: {_why(exc)}; skipped")
    return out, notes


def _why(exc: Exception) -> str:
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    if isinstance(exc, KeyError):
        text = f"no field {text}"
    elif isinstance(exc, NotRegular):
        text = f"not a regular file: {text}"
    return printable(text or type(exc).__name__)[:120]


def dropped(run_dir: str | Path, job_id: str) -> list[tuple[str, str]]:
    """Every node an attempt of the job dropped, with the latest reason for it."""
    latest: dict[str, str] = {}
    for _, a in read(run_dir, job_id):
        for host, why in a.dropped:
            latest.pop(host, None)
            latest[host] = why
    return list(latest.items())
