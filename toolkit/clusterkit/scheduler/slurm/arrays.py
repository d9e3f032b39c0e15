"""A job array's status from Slurm: its tasks' and the whole array's (the array's record and
its tasks' views: :mod:`clusterkit.scheduler.arrays`).

Status for any number of arrays costs two calls: one ``squeue -r`` (one line per task, pending
ones too) and one ``sacct -X -D`` keyed by ``JobID`` (``4242_3``, one line per run); a task
neither knows is taken from its result file, else it is pending while the array is known to
Slurm.  The array's own status is the tasks' counted by state (``3 COMPLETED, 1 RUNNING``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from clusterkit.errors import SlurmUnreachable
from clusterkit.scheduler.arrays import indices, is_task, split_task
from clusterkit.scheduler.base import JobStatus, settle, with_script_reason
from clusterkit.scheduler.results import read_result_file, result_file
from clusterkit.scheduler.slurm.tables import SQUEUE_FORMAT, sacct_statuses, squeue_statuses
from clusterkit.slurmtext import last_line
from clusterkit.vocab import JobState

if TYPE_CHECKING:
    from clusterkit.scheduler.records import JobRecord
    from clusterkit.scheduler.slurm.tables import SlurmQuery

ARRAY_SACCT_FIELDS = ("JobID", "State", "ExitCode", "NodeList")
# which state names the array as a whole, when its tasks differ: the first found in this order
_ORDER = (JobState.RUNNING, JobState.COMPLETING, JobState.CONFIGURING, JobState.REQUEUED, JobState.PENDING,
          JobState.SUBMITTED, JobState.UNKNOWN, JobState.FAILED, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY,
          JobState.TIMEOUT, JobState.CANCELLED, JobState.PREEMPTED, JobState.LOST)


def task_statuses(query: SlurmQuery, arrays: Sequence[JobRecord]) -> dict[str, dict[int, JobStatus]]:
    """Array job id -> task index -> status, for every array in ``arrays`` (two Slurm calls)."""
    ids = sorted({rec.job_id.split("_")[0] for rec in arrays}, key=lambda j: (len(j), j))
    if not ids:
        return {}
    joined = ",".join(ids)
    sq = query._call(["squeue", "-h", "-r", "--states=all", "-j", joined, "-o", SQUEUE_FORMAT])
    if sq.returncode != 0 and "Invalid job id" not in sq.stderr:
        raise SlurmUnreachable(f"cannot reach Slurm controller: {last_line(sq.stderr)}")
    live = squeue_statuses(sq.stdout) if sq.returncode == 0 else {}
    acct = query._call(["sacct", "-X", "-D", "-P", "-n", "-j", joined, "-o", ",".join(ARRAY_SACCT_FIELDS)])
    done = sacct_statuses(acct.stdout, ARRAY_SACCT_FIELDS) if acct.returncode == 0 else {}
    out: dict[str, dict[int, JobStatus]] = {jid: {} for jid in ids}
    for table in (done, live):      # squeue's word on a live task wins, sacct's fills its gaps
        for key, st in table.items():
            task = split_task(key)
            if task is None or task[0] not in out:
                continue
            seen = out[task[0]].get(task[1])
            out[task[0]][task[1]] = st.merged(seen) if seen is not None and table is live else st
    return out


def task_status(rec: JobRecord, index: int, seen: dict[int, JobStatus]) -> JobStatus:
    """Task ``index`` of the array ``rec`` from what Slurm said (``seen``), its result file and
    reason: the rule every Slurm job's status follows (:func:`clusterkit.scheduler.base.settle`)."""
    jid = f"{rec.job_id.split('_')[0]}_{index}"
    code = read_result_file(result_file(Path(rec.run_dir), jid))
    st = settle(rec, seen.get(index), code, own_record=is_task(rec), siblings_listed=bool(seen))
    return with_script_reason(rec, st, jid)


def counts(tasks: Sequence[tuple[str, JobStatus]]) -> str:
    """``12 COMPLETED, 3 RUNNING, 1 FAILED``: the tasks by state, the most first."""
    c = Counter(st.state.value for _, st in tasks)
    return ", ".join(f"{n} {state}" for state, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


def array_status(rec: JobRecord, seen: dict[int, JobStatus]) -> JobStatus:
    """The whole array: its state (RUNNING while any task runs, COMPLETED once all did, else the
    worst end), the first failed task's exit code, and the tasks' counts as its reason."""
    known = indices(rec) or ()
    tasks = tuple((f"{rec.job_id}_{i}", task_status(rec, i, seen)) for i in known)
    states = {st.state for _, st in tasks}
    if len(states) == 1:
        state = next(iter(states))
    elif any(not s.is_terminal for s in states):
        state = next((s for s in _ORDER if s in states and not s.is_terminal), JobState.RUNNING)
    else:
        state = next((s for s in _ORDER if s in states), JobState.FAILED)
    bad = next((st for _, st in tasks if st.terminal and st.state != JobState.COMPLETED), None)
    restarts = sum(st.restarts or 0 for _, st in tasks)
    return JobStatus(state=state, exit_code=None if bad is None and not all(s.terminal for _, s in tasks)
                     else (bad.exit_code if bad is not None else 0),
                     signal=bad.signal if bad is not None else None, reason=counts(tasks),
                     restarts=restarts, source="squeue+sacct", tasks=tasks)


def slurm_array_statuses(query: SlurmQuery, records: Sequence[JobRecord]) -> list[JobStatus]:
    """The status of each array or array task in ``records``."""
    seen = task_statuses(query, records)
    out = []
    for rec in records:
        base = rec.job_id.split("_")[0]
        if is_task(rec):
            task = split_task(rec.job_id)
            assert task is not None
            out.append(task_status(rec, task[1], seen.get(base, {})))
        else:
            out.append(array_status(rec, seen.get(base, {})))
    return out
