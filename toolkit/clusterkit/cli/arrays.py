"""What ``render`` and ``submit --dry-run`` say about a job array: its tasks and a sweep's values."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clusterkit.job.array import ArrayPlan


def task_lines(arr: ArrayPlan) -> list[str]:
    """``array: 4 tasks (#SBATCH --array=0-3%2), at most 2 at once`` and, for a sweep, one line per
    task with its values (``task 0: lr=0.1 seed=1``)."""
    at_once = f", at most {arr.throttle} at once" if arr.throttle else ""
    lines = [f"array: {arr.size} task(s) (#SBATCH --array={arr.spec}){at_once}"]
    if arr.keys:
        lines += [f"  task {i}: " + " ".join(f"{k}={v}" for k, v in arr.task_values(i).items()) for i in arr.indices]
    return lines


def tasks_json(arr: ArrayPlan | None) -> dict[str, Any]:
    """The ``array`` key of ``render --json`` / ``submit --dry-run --json`` (absent without one)."""
    if arr is None:
        return {}
    return {"array": {"spec": arr.spec, "tasks": len(arr.indices), "throttle": arr.throttle,
                      "task_list": [{"index": i, "values": arr.task_values(i)} for i in arr.indices]}}
