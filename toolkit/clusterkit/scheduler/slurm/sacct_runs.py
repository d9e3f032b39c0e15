"""Slurm's accounting of a job's allocations:
``sacct -X -D -P -n -o JobIDRaw,State,Submit,Start,End,ElapsedRaw,AllocTRES``.

With ``-D`` (``--duplicates``) a requeued job has one row per run, oldest first; with ``-X`` no
step rows (any that come anyway, ``123.batch``, are left out).  Each job row becomes an
:class:`Allocation`: when it was submitted, started and ended (Slurm prints local time without a
zone; ``Unknown`` while it has not), how long it held its nodes (``ElapsedRaw``, seconds) and how
many GPUs (``AllocTRES``'s ``gres/gpu=N``; the typed ``gres/gpu:h100=N`` entries only where the
untyped total is absent, so a GPU is never counted twice).  What :mod:`clusterkit.scheduler.runaccount`
adds up (:class:`~clusterkit.scheduler.runaccount.Allocation` lies there: a local job's allocation
is made from its record).  The text is Slurm's, read as data: bounded rows, each field checked, a
row that does not fit left out (``skipped`` counts them), never an error.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence

from clusterkit import slurmclient
from clusterkit.scheduler.runaccount import Allocation
from clusterkit.scheduler.slurm.tables import SacctTable, parse_sacct
from clusterkit.slurmtext import last_line
from clusterkit.tooltext import parse_int
from clusterkit.vocab import JobState, is_job_id

FIELDS = ("JobIDRaw", "State", "Submit", "Start", "End", "ElapsedRaw", "AllocTRES")
MAX_ROWS = 20_000            # job rows kept from one answer
MAX_ELAPSED_S = 10 * 365 * 86400
MAX_GPUS = 1_000_000
_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})")
_GPU = re.compile(r"gres/gpu(?::[A-Za-z0-9_.-]{1,64})?=(\d{1,9})")


def parse_local_time(text: str) -> float | None:
    """Slurm's ``2024-11-13T13:02:56`` (the controller's local time) in unix seconds; None for
    ``Unknown``, ``None`` or anything else."""
    m = _TIME.fullmatch(text.strip())
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups())
    if not (1970 <= y <= 9999 and 1 <= mo <= 12 and 1 <= d <= 31 and h <= 23 and mi <= 59 and s <= 60):
        return None
    try:
        return time.mktime((y, mo, d, h, mi, s, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def tres_gpus(tres: str) -> int | None:
    """The GPUs in a TRES list (``billing=12,cpu=8,gres/gpu=1,mem=64G,node=1`` -> 1); 0 where it
    names none; None where it is not a TRES list at all."""
    items = [t for t in tres.strip().split(",") if t]
    if not tres.strip():
        return 0
    if any("=" not in t for t in items):
        return None
    plain = [int(m.group(1)) for t in items if (m := _GPU.fullmatch(t)) and ":" not in t.split("=")[0]]
    typed = [int(m.group(1)) for t in items if (m := _GPU.fullmatch(t)) and ":" in t.split("=")[0]]
    n = plain[0] if plain else sum(typed)
    return n if n <= MAX_GPUS else None


def allocations(text: str, fields: Sequence[str] = FIELDS) -> tuple[list[Allocation], int]:
    """The job rows of ``sacct -P`` text (its header line, if any, is no job) -> allocations in
    the order Slurm printed them, and how many rows were left out as not fitting."""
    table = parse_sacct(text, fields, skip_bad_rows=True)
    out: list[Allocation] = []
    skipped = 0
    for r in table.rows if isinstance(table, SacctTable) else ():
        jid = r.job_id.strip()
        if "." in jid or jid == "JobIDRaw":       # a step, the header line
            continue
        elapsed = parse_int(r.fields.get("ElapsedRaw", "").strip())
        gpus = tres_gpus(r.fields.get("AllocTRES", "")) if "AllocTRES" in r.fields else None
        if not is_job_id(jid) or elapsed is None or elapsed > MAX_ELAPSED_S or len(out) >= MAX_ROWS:
            skipped += 1
            continue
        t = {k: parse_local_time(r.fields.get(k, "")) for k in ("Submit", "Start", "End")}
        out.append(Allocation(jid, JobState.parse(r.state).value, t["Submit"], t["Start"], t["End"], elapsed, gpus))
    return out, skipped


def query(job_ids: Iterable[str], run: slurmclient.Run = slurmclient.run,
          timeout_s: float = 60.0) -> tuple[list[Allocation], int] | str:
    """Every allocation of ``job_ids`` from one sacct call; Slurm's words when sacct fails
    (no slurmdbd: "accounting storage is disabled", no sacct)."""
    ids = sorted({j for j in job_ids if is_job_id(j)}, key=lambda j: (len(j), j))
    if not ids:
        return [], 0
    argv = ["sacct", "-X", "-D", "-P", "-n", "-j", ",".join(ids), "-o", ",".join(FIELDS)]
    answer = run(argv, timeout_s)
    if answer.returncode != 0:
        return slurmclient.unreachable(answer) or f"sacct failed (exit {answer.returncode}): {last_line(answer.stderr)}"
    return allocations(answer.stdout)


TAG_FIELDS = (*FIELDS, "User", "Comment")
MAX_WINDOW_S = 366 * 86400     # how far back a run's jobs are searched for


def tagged(tag: str, user: str, since: float, run: slurmclient.Run = slurmclient.run,
           timeout_s: float = 60.0, now: float | None = None) -> tuple[list[Allocation], int] | str:
    """Every allocation Slurm's accounting holds of ``user``'s jobs whose comment is ``tag`` (a
    run's tag, :mod:`clusterkit.job.runtag`), submitted since ``since`` (unix seconds, at most a
    year back): one ``sacct -u USER -S TIME`` call; rows of another user, or with another comment,
    are left out, as are rows that do not fit (counted).  Slurm's words when sacct fails."""
    now = time.time() if now is None else now
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(max(since, now - MAX_WINDOW_S)))
    argv = ["sacct", "-X", "-D", "-P", "-n", "-u", user, "-S", start, "-E", "now", "-o", ",".join(TAG_FIELDS)]
    answer = run(argv, timeout_s)
    if answer.returncode != 0:
        return slurmclient.unreachable(answer) or f"sacct failed (exit {answer.returncode}): {last_line(answer.stderr)}"
    return mine(answer.stdout, tag, user)


def mine(text: str, tag: str, user: str) -> tuple[list[Allocation], int]:
    """The allocations of ``sacct -o TAG_FIELDS`` text that are ``user``'s and carry ``tag``."""
    table = parse_sacct(text, TAG_FIELDS, skip_bad_rows=True)
    rows = table.rows if isinstance(table, SacctTable) else []
    ours = [r.raw for r in rows[:MAX_ROWS]
            if r.fields.get("User", "").strip() == user and r.fields.get("Comment", "").strip() == tag]
    found, skipped = allocations("\n".join(ours), TAG_FIELDS)
    return found, skipped + max(0, sum(1 for ln in text.splitlines() if ln.strip()) - len(rows))
