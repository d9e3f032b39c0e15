"""What ``render`` and ``submit --dry-run`` say about a job array: its tasks and a sweep's values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clusterkit.job.array import ArrayPlan
    from clusterkit.scheduler.base import JobStatus
    from clusterkit.scheduler.records import JobRecord


def task_lines(arr: ArrayPlan, *, slurm: bool = True) -> list[str]:
    """``array: 4 tasks (#SBATCH --array=0-3%2), at most 2 at once`` (on a local site: ``4 task(s),
    one after another on this machine``) and, for a sweep, one line per task with its values
    (``task 0: lr=0.1 seed=1``)."""
    at_once = f", at most {arr.throttle} at once" if arr.throttle else ""
    head = (f"array: {arr.size} task(s) (#SBATCH --array={arr.spec}){at_once}" if slurm
            else f"{'sweep' if arr.keys else 'array'}: {arr.size} task(s), one after another on this machine")
    return [head, *values_lines(arr.indices, arr.keys, arr.values)]


def values_lines(indices: Sequence[int], keys: Sequence[str], values: Sequence[Sequence[str]]) -> list[str]:
    """One line per task of a sweep with its values (none without a sweep)."""
    if not keys:
        return []
    return [f"  task {i}: " + " ".join(f"{k}={v}" for k, v in zip(keys, vals, strict=True))
            for i, vals in zip(indices, values, strict=True)]


def tasks_json(arr: ArrayPlan | None) -> dict[str, Any]:
    """The ``array`` key of ``render --json`` / ``submit --dry-run --json`` (absent without one)."""
    if arr is None:
        return {}
    return {"array": {"spec": arr.spec, "tasks": len(arr.indices), "throttle": arr.throttle,
                      "task_list": [{"index": i, "values": arr.task_values(i)} for i in arr.indices]}}


def show_tasks(rec: JobRecord, st: JobStatus) -> None:
    """A job array's tasks, one line each (``status ARRAYJOB``), a sweep's with its values."""
    from clusterkit.cli import output
    from clusterkit.tooltext import printable

    found = rec.plan.get("array")
    arr: dict[str, Any] = found if isinstance(found, dict) else {}
    keys = arr.get("sweep_keys") or []
    values = dict(zip(arr.get("indices") or [], arr.get("sweep_values") or [], strict=False))
    for jid, t in st.tasks:
        index = jid.rpartition("_")[2]
        vals = values.get(int(index)) if index.isdigit() else None
        detail = [" ".join(f"{k}={v}" for k, v in zip(keys, vals, strict=False))] if keys and vals else []
        detail += [f"exit code {t.exit_code}"] if t.exit_code is not None else []
        detail += [f"signal {t.signal}"] if t.signal is not None else []
        detail += [f"{t.restarts} restart(s)"] if t.restarts else []
        detail += [f"nodes {t.nodes}"] if t.nodes else []
        detail += [f"reason: {t.reason}"] if t.reason else []
        output.line(printable(f"  task {jid:<14} {t.state.value:<11} {', '.join(detail)}".rstrip()))
