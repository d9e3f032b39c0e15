"""A job array's task indices, as its record's plan lists them, and the fields that make the
array's record the view of one task (``ARRAYJOB_TASK``, :func:`clusterkit.scheduler.arrays.task_view`).

Plain values only, no record type: :mod:`.records` names a task through this module when a
lookup finds no record of its own, and :mod:`.arrays` builds on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clusterkit.errors import NoJobRecord
from clusterkit.vocab import JobState


def plan_indices(plan: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The task indices a record's ``plan`` lists (None: not an array job)."""
    arr = plan.get("array")
    if not isinstance(arr, dict):
        return None
    got = arr.get("indices")
    if not isinstance(got, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in got):
        return None
    return tuple(got)


def task_fields(job_id: str, plan: Mapping[str, Any], state: JobState | None, index: int) -> dict[str, Any]:
    """The fields of the array ``job_id``'s record that task ``index``'s view replaces; refused
    with NoJobRecord when the array has no such task."""
    known = plan_indices(plan)
    if known is None or index not in known:
        raise NoJobRecord(f"job {job_id} has no array task {index}"
                          + (f" (its tasks: {_fold(known)})" if known else " (it is not a job array)"))
    st = state if state is not None and state.is_terminal and state == JobState.COMPLETED else None
    return {"job_id": f"{job_id}_{index}", "state": st, "exit_code": None, "signal": None, "reason": None,
            "diagnosis": None}


def _fold(idx: Sequence[int]) -> str:
    """``0,1,2,5`` -> ``0-2,5`` (Slurm's array syntax)."""
    out: list[str] = []
    start = prev = idx[0]
    for i in (*idx[1:], None):
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(out)
