"""Doctor's verdict for the failures of a run's account that the job's supervisor did not judge
(docs/jobs.md, "What a run cost").

The supervisor asks ``doctor`` about each attempt it relaunches or ends; an allocation that ended
without it (the node it ran on died, Slurm killed it, a local job failed) has no verdict recorded.
``status --run`` then runs doctor on that job's logs itself, split by restart as doctor splits them,
within bounds: at most :data:`MAX_JOBS` jobs, each with at most :data:`MAX_FILES` log files and
:data:`MAX_BYTES` of them.  Past a bound, or without the job's logs, the failure says ``not judged``
and why (and ``clusterkit doctor JOB`` reads all of it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from clusterkit.tooltext import printable

if TYPE_CHECKING:
    from clusterkit.scheduler.records import JobRecord
    from clusterkit.scheduler.runcauses import Causes, Failure

MAX_JOBS = 10
MAX_FILES = 200
MAX_BYTES = 64 << 20
_TEXT = 400


def _worded(v: Mapping[str, Any]) -> str:
    """doctor's verdict of one restart in one line, as ``doctor`` keeps it in a job's record."""
    where = ", ".join(x for x in (f"node {v.get('node')}" if v.get("node") else "",
                                  f"rank {v.get('rank')}" if isinstance(v.get("rank"), int) else "") if x)
    text = f"{v.get('category', '?')}" + (f" ({where})" if where else "") + f": {v.get('summary', '')}"
    return printable(text)[:_TEXT]


def _doctor(rec: JobRecord | None, job_id: str) -> dict[int, str] | str:
    """doctor's verdict of each restart of the job from its logs, or why there is none."""
    from clusterkit.diagnose.doctor import diagnose_files
    from clusterkit.scheduler.logs import log_files

    if rec is None:
        return "no record of this job here: its logs are where it was submitted"
    files = log_files(rec)
    if not files:
        return f"no log files in {printable(rec.run_dir)[:200]}"
    size = 0
    for p in files:
        try:
            size += p.stat().st_size
        except OSError:
            continue
    if files.total > MAX_FILES or size > MAX_BYTES:
        return (f"its {files.total} log file(s), {size / 2**20:.0f} MiB, are more than status reads "
                f"({MAX_FILES} files, {MAX_BYTES >> 20} MiB): clusterkit doctor {job_id}")
    report = diagnose_files(files, None, job=rec.key)
    if report["files"]["read"] == 0:
        return "its log files could not be read"
    return {int(r["restart"]): _worded(r["verdict"]) for r in report["restarts"]}


def judged(causes: Causes, records: Mapping[str, JobRecord]) -> Causes:
    """``causes`` with each failure's verdict said to be the supervisor's, doctor's now, or none and why."""
    found: dict[str, dict[int, str] | str] = {}
    out: list[Failure] = []
    for f in causes.failures:
        if f.verdict:
            out.append(replace(f, judged_by="supervisor"))
            continue
        if f.job_id not in found:
            found[f.job_id] = (_doctor(records.get(f.job_id), f.job_id) if len(found) < MAX_JOBS else
                               f"more than {MAX_JOBS} jobs' logs to read: clusterkit doctor {f.job_id}")
        got = found[f.job_id]
        if isinstance(got, str):
            out.append(replace(f, not_judged=got))
        elif f.restart in got:
            out.append(replace(f, verdict=got[f.restart], judged_by="doctor"))
        else:
            out.append(replace(f, not_judged=f"its logs hold nothing of restart {f.restart}"))
    return replace(causes, failures=tuple(out))
