"""What ``status`` shows of a job's ranks: how many report, and the stragglers among them
(:func:`clusterkit.supervise.ranks.stragglers`, by the ratio the job's plan holds: ``--set
straggler_ratio`` or the site's ``watch.straggler_ratio``).  docs/architecture.md §3, "Watching a run"."""

from __future__ import annotations

from typing import Any

from clusterkit import jobfiles
from clusterkit.config.watch_keys import WatchKeys
from clusterkit.scheduler.records import JobRecord
from clusterkit.supervise import ranks


def ratio_of(rec: JobRecord) -> float:
    """The job's straggler ratio: its plan's (a bounded number), else the default."""
    settings = rec.plan.get("settings") if isinstance(rec.plan, dict) else None
    got = settings.get("straggler_ratio") if isinstance(settings, dict) else None
    if isinstance(got, int | float) and not isinstance(got, bool) and (got == 0 or 1 < got <= 100):
        return float(got)
    return float(WatchKeys().straggler_ratio)


def view(rec: JobRecord) -> dict[str, Any]:
    """The ranks reporting (their newest lines, the newest attempt's) and the stragglers."""
    lines = ranks.read_all(jobfiles.logs(rec.run_dir), rec.job_id)
    ratio = ratio_of(rec)
    return {"reporting": len(lines), "ratio": ratio, "stragglers": ranks.stragglers(lines, ratio),
            "lines": lines}
