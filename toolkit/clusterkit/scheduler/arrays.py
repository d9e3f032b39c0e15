"""Job arrays after submission: one record for the array (its job id, ``ARRAYJOB``) and a view of
it for each task (``ARRAYJOB_TASK``), for either scheduler.

The array's record holds the plan, whose ``array`` entry lists the task indices.  A task is
named on the command line as ``ARRAYJOB_TASK`` (``status 4242_3``, ``logs 4242_3``, ``cancel
4242_3``): :func:`task_view` is the array's record with that job id, never saved on its own
(the array's record is the one on disk).  A task's result file is ``<run dir>/ARRAYJOB_TASK.result``
and its logs carry ``ARRAYJOB_TASK`` in their names, so the record's own lookups serve it.
Their status from Slurm: :mod:`clusterkit.scheduler.slurm.arrays`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from clusterkit.scheduler.array_tasks import plan_indices, task_fields

if TYPE_CHECKING:
    from clusterkit.scheduler.base import JobStatus
    from clusterkit.scheduler.records import JobRecord

_TASK = re.compile(r"([0-9]{1,20})_([0-9]{1,10})")


def indices(rec: JobRecord) -> tuple[int, ...] | None:
    """The task indices of the array ``rec`` records (None: not an array job)."""
    return plan_indices(rec.plan)


def is_array(rec: JobRecord) -> bool:
    """Whether ``rec`` is a whole array (the array's own record)."""
    return indices(rec) is not None and "_" not in rec.job_id


def is_task(rec: JobRecord) -> bool:
    """Whether ``rec`` is the view of one array task (:func:`task_view`): never saved."""
    return indices(rec) is not None and "_" in rec.job_id


def split_task(job_id: str) -> tuple[str, int] | None:
    """``"4242_3"`` -> ``("4242", 3)``; None for a plain job id."""
    m = _TASK.fullmatch(job_id)
    return (m.group(1), int(m.group(2))) if m else None


def task_view(rec: JobRecord, index: int) -> JobRecord:
    """Task ``index`` of the array ``rec``, as a record of its own (``ARRAYJOB_TASK``); refused
    with NoJobRecord when the array has no such task."""
    return rec.model_copy(update=task_fields(rec.job_id, rec.plan, rec.state, index))


def task_rows(st: JobStatus) -> list[dict[str, Any]]:
    """``status JOB --json``'s ``tasks``: one row per task."""
    return [{"job_id": jid, "state": t.state.value, "exit_code": t.exit_code, "signal": t.signal,
             "reason": t.reason, "node_list": t.nodes, "restarts": t.restarts} for jid, t in st.tasks]
