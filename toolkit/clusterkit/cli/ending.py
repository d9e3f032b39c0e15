"""What a waited-for job that failed says last: doctor's verdict in one line (the exception, not
torchrun's ``error_file: <N/A>`` report), its node and rank, and the command that tells more."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clusterkit.api import Job


def cause_lines(job: Job) -> list[str]:
    """``cause: <verdict>`` (rank, node) and ``why in full: clusterkit doctor JOB``; the doctor
    line alone when the diagnosis fails or finds nothing."""
    from clusterkit.errors import ClusterkitError
    from clusterkit.tooltext import printable

    ref = job.id if job.id.replace("_", "").isdigit() else job.key
    more = f"why in full: clusterkit doctor {ref}"
    try:
        verdict = job.doctor().report.get("verdict") or {}
    except (ClusterkitError, OSError):
        return [more]
    summary = verdict.get("summary")
    if not summary or verdict.get("category") == "ok":
        return [more]
    where = [f"rank {verdict['rank']}" if verdict.get("rank") is not None else "",
             f"node {verdict['node']}" if verdict.get("node") else ""]
    place = ", ".join(w for w in where if w)
    return [printable(f"cause: {summary}" + (f" ({place})" if place else ""))[:400], more]
