"""``clusterkit status JOB``'s lines for the failed attempts inside the allocation (each run's):
the nodes, the status, doctor's verdict, what followed (docs/architecture.md §3, recovery)."""

from __future__ import annotations

from clusterkit.api import Job
from clusterkit.cli import output
from clusterkit.tooltext import printable


def show_attempts(job: Job) -> None:
    for a in job.attempts():
        nodes = ",".join(str(n) for n in a["nodes"])  # type: ignore[attr-defined]
        output.line(printable(f"  attempt {a['attempt']} (restart {a['restart']}) on {nodes}: status {a['status']}, "
                              f"{a['verdict']}; then {a['then']}"))
