"""``clusterkit doctor ARRAYJOB``: each failed task of a job array diagnosed on its own (its logs,
Slurm's view of it), and equal verdicts grouped: ``3 task(s) (4242_1, 4242_5, 4242_9): oom: ...``.

The report is the first task's of the largest group (as ``doctor ARRAYJOB_TASK`` gives it),
with ``array`` added: the tasks by state and the groups.  An array with no failed task is
diagnosed as one job over every task's logs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clusterkit.scheduler.arrays import split_task, task_view
from clusterkit.scheduler.status import refresh
from clusterkit.vocab import JobState

if TYPE_CHECKING:
    from clusterkit.diagnose.diagnosis import Diagnosis
    from clusterkit.scheduler.records import JobRecord
    from clusterkit.scheduler.slurm.tables import SlurmQuery


def diagnose_array(rec: JobRecord, one: Callable[[JobRecord], Diagnosis], query: SlurmQuery) -> Diagnosis:
    """Diagnose every failed task of the array ``rec`` with ``one`` and group equal verdicts."""
    (_, st), = refresh([rec], query)
    failed = [jid for jid, t in st.tasks if t.terminal and t.state != JobState.COMPLETED]
    if not failed:
        return one(rec)   # every task's logs, as one job
    found: dict[str, Diagnosis] = {}
    for jid in failed:
        task = split_task(jid)
        assert task is not None
        found[jid] = one(task_view(rec, task[1]))
    groups: dict[tuple[str, str], list[str]] = {}
    for jid, d in found.items():
        v = d.report["verdict"]
        groups.setdefault((v["category"], v["summary"]), []).append(jid)
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    first = found[ordered[0][1][0]]
    report: dict[str, Any] = dict(first.report)
    report["job"] = rec.key
    report["array"] = {
        "tasks": st.reason, "failed": len(failed),
        "groups": [{"category": cat, "summary": summary, "tasks": jids,
                    "advice": found[jids[0]].report["verdict"]["advice"]} for (cat, summary), jids in ordered],
        "example": ordered[0][1][0],
    }
    notes = [n for d in found.values() for n in d.notes]
    return type(first)(report, notes)


def group_lines(report: dict[str, Any]) -> list[str]:
    """What ``doctor ARRAYJOB`` prints above the example task's report."""
    arr = report["array"]
    lines = [f"array {report['job']}: {arr['tasks']}; {arr['failed']} failed task(s), "
             f"{len(arr['groups'])} verdict(s)"]
    for g in arr["groups"]:
        shown = ", ".join(g["tasks"][:8]) + (f" and {len(g['tasks']) - 8} more" if len(g["tasks"]) > 8 else "")
        lines.append(f"  {len(g['tasks'])} task(s) ({shown}): {g['category']}: {g['summary']}")
    lines.append(f"task {arr['example']} (the first of the largest group):")
    return lines
