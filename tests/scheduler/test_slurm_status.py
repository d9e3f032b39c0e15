"""How a Slurm job's status is decided from Slurm's state and the job script's result file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from clusterkit.scheduler.base import JobStatus
from clusterkit.scheduler.records import JobRecord
from clusterkit.scheduler.slurm import SlurmScheduler
from clusterkit.scheduler.slurm.tables import SlurmQuery
from clusterkit.vocab import JobState


class _Answers(SlurmQuery):
    """Stand-in for squeue/sacct: answers the states it was given (no Slurm client runs)."""

    def __init__(self, states: dict[str, JobStatus]) -> None:
        super().__init__()
        self.answers = states

    def states(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:  # type: ignore[override]
        return {j: self.answers[j] for j in job_ids if j in self.answers}


def _rec(run_dir: Path, job_id: str) -> JobRecord:
    return JobRecord(job_id=job_id, scheduler="slurm", site="s", site_source="s.yaml", stage="multi-node",
                     launcher="srun", job_name="ck", nnodes=2, world_size=4, command=["python", "t.py"],
                     run_dir=str(run_dir), script="job.sbatch", submitted_at="2026-01-01T00:00:00.000000Z",
                     host="login1", plan={})


def test_preempted_with_a_result_file_is_the_end_the_script_wrote(tmp_path: Path) -> None:
    """Slurm 24.05+ records PREEMPTED for a job preempted once and ended later by its own script
    (job-endgame.sh.j2); the result file (and reason) the script wrote say how it ended."""
    (tmp_path / "11.result").write_text("0\n")
    (tmp_path / "12.result").write_text("1\n")
    (tmp_path / "12.reason").write_text("stopped by preemption and the budget of 1 restarts is spent\n")
    answers = {j: JobStatus(state=JobState.PREEMPTED, restarts=1, nodes="node[1-2]", source="sacct")
               for j in ("11", "12", "13")}
    done, failed, preempted = SlurmScheduler(_Answers(answers)).status(
        [_rec(tmp_path, "11"), _rec(tmp_path, "12"), _rec(tmp_path, "13")])
    assert (done.state, done.exit_code, done.restarts, done.nodes) == (JobState.COMPLETED, 0, 1, "node[1-2]")
    assert (failed.state, failed.exit_code, failed.restarts) == (JobState.FAILED, 1, 1)
    assert failed.reason == "stopped by preemption and the budget of 1 restarts is spent"
    assert preempted.state == JobState.PREEMPTED   # no result file: Slurm's word stands


def test_failed_with_exit_code_zero_takes_the_result_files_code(tmp_path: Path) -> None:
    """FAILED with exit code 0 contradicts itself (accounting that has not caught up with the
    job's end): the result file the job script wrote has the launcher's status.  COMPLETED with
    0, and a job ended by a signal, keep Slurm's word."""
    for j in ("21", "22", "23"):
        (tmp_path / f"{j}.result").write_text("3\n")
    answers = {"21": JobStatus(state=JobState.FAILED, exit_code=0, source="sacct"),
               "22": JobStatus(state=JobState.FAILED, exit_code=0, signal=9, source="sacct"),
               "23": JobStatus(state=JobState.FAILED, exit_code=2, source="sacct")}
    zero, killed, given = SlurmScheduler(_Answers(answers)).status(
        [_rec(tmp_path, "21"), _rec(tmp_path, "22"), _rec(tmp_path, "23")])
    assert (zero.state, zero.exit_code) == (JobState.FAILED, 3)
    assert (killed.exit_code, killed.signal) == (0, 9)
    assert given.exit_code == 2


def test_an_array_task_preempted_then_ended_by_its_script_is_that_end(tmp_path: Path) -> None:
    """The same rule for a task of a job array (``ARRAYJOB_TASK``, its own result file): found on
    Slurm 24.11, where sacct lists a preempted task that was run again and then completed as
    PREEMPTED, and ``status 4242_1`` kept saying PREEMPTED."""
    from clusterkit.scheduler.slurm.arrays import array_status, task_status

    rec = _rec(tmp_path, "4242").model_copy(update={"plan": {"array": {"indices": [0, 1, 2]}}})
    (tmp_path / "4242_1.result").write_text("0\n")
    seen = {0: JobStatus(state=JobState.RUNNING, source="squeue"),
            1: JobStatus(state=JobState.PREEMPTED, restarts=1, nodes="node[3-4]", source="sacct"),
            2: JobStatus(state=JobState.PREEMPTED, restarts=0, source="sacct")}
    one = task_status(rec, 1, seen)
    assert (one.state, one.exit_code, one.restarts, one.nodes) == (JobState.COMPLETED, 0, 1, "node[3-4]")
    assert task_status(rec, 2, seen).state == JobState.PREEMPTED   # no result file: Slurm's word
    assert array_status(rec, seen).reason == "1 COMPLETED, 1 PREEMPTED, 1 RUNNING"


def test_a_job_and_an_array_task_follow_one_rule(tmp_path: Path) -> None:
    """The same answers from Slurm, the same result and reason files: a plain job and an array
    task get the same status.  The task's rule once differed: it kept a FAILED task's
    contradicting exit code 0, and its reason file was shown with its control characters."""
    from clusterkit.scheduler.slurm.arrays import task_status

    arr = _rec(tmp_path, "50").model_copy(update={"plan": {"array": {"indices": [0, 1, 2, 3]}}})
    cases = {0: JobStatus(state=JobState.FAILED, exit_code=0, source="sacct"),       # contradicts itself
             1: JobStatus(state=JobState.RUNNING, exit_code=1, source="sacct"),      # a requeued run's old code
             2: JobStatus(state=JobState.COMPLETED, exit_code=0, source="sacct"),
             3: JobStatus(state=JobState.PREEMPTED, restarts=1, source="sacct")}
    for i in cases:
        for jid in (f"6{i}", f"50_{i}"):
            (tmp_path / f"{jid}.result").write_text("3\n" if i != 2 else "0\n")
            (tmp_path / f"{jid}.reason").write_text("the \x1b[31mbudget\x1b[0m is spent\n")
    jobs = SlurmScheduler(_Answers({f"6{i}": st for i, st in cases.items()})).status(
        [_rec(tmp_path, f"6{i}") for i in cases])
    tasks = [task_status(arr, i, cases) for i in cases]
    for job, task in zip(jobs, tasks, strict=True):
        assert (job.state, job.exit_code, job.signal, job.reason) == (task.state, task.exit_code, task.signal,
                                                                      task.reason)
    assert [t.exit_code for t in tasks] == [3, None, 0, 3]
    assert tasks[0].reason is not None and "\x1b" not in tasks[0].reason and "budget" in tasks[0].reason
