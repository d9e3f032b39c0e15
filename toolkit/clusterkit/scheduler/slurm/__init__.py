"""The Slurm scheduler: sbatch through submitit, with our rendered ``job.sbatch`` as the one truth.

**Submit.**  submitit's ``SlurmExecutor`` is given a submission file text that is the rendered
``job.sbatch``, byte for byte, so no second place emits ``#SBATCH`` lines and
``submit --dry-run`` shows exactly what sbatch receives.  submitit writes the file into the
run directory, runs ``sbatch``, parses the job id and keeps ``<job id>_submission.sh``.  The
script runs a shell command, not a pickled function, so no pickle is written; the script
itself writes ``<run dir>/<job id>.result`` (its exit status) when the job ends for good.
submitit is imported only when a job is submitted (``clusterkit --help`` and ``status`` stay fast).

**Requeue.**  The rendered script traps the time-limit warning (``--signal=B:USR2@T``), sends
TERM to the ranks through their job steps, gives them ``scheduler.grace_s`` and calls
``scontrol requeue`` while ``SLURM_RESTART_COUNT`` is under the site's budget; a preempted run
is requeued the same way.  The job keeps its id across restarts, so the job record and the
logs (``--open-mode=append``) stay valid; the restart count is read from scontrol by ``status``.

**Status** comes from :class:`~clusterkit.scheduler.slurm.tables.SlurmQuery` (squeue, sacct,
scontrol: a constant number of calls for any number of jobs), then the result file, then the
state cached in the record.  **Cancel** lets the ranks save first (SIGTERM, ``grace_s``).
"""

from __future__ import annotations

import contextlib
import io
import re
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from clusterkit import slurmclient
from clusterkit.errors import SlurmUnreachable, SubmitError
from clusterkit.scheduler.base import (
    CancelOutcome,
    JobDetails,
    JobStatus,
    OnGrace,
    cached_status,
    settle,
    status_from_result,
    with_script_reason,
)
from clusterkit.scheduler.logs import log_files
from clusterkit.scheduler.results import read_result_file
from clusterkit.scheduler.slurm.tables import SlurmQuery
from clusterkit.slurmtext import UNREACHABLE, last_line
from clusterkit.vocab import JobState, SchedulerKind, is_job_id

if TYPE_CHECKING:
    from submitit.slurm.slurm import SlurmExecutor

    from clusterkit.rundir import RenderedRun
    from clusterkit.scheduler.records import JobRecord


class SlurmScheduler:
    kind: SchedulerKind = "slurm"

    def __init__(self, query: SlurmQuery | None = None) -> None:
        self.query = query or SlurmQuery()

    def submit(self, run: RenderedRun) -> str:
        return submit_slurm(run.run_dir, run.artifacts["job.sbatch"])

    def status(self, records: Sequence[JobRecord]) -> list[JobStatus]:
        """Slurm is asked about every record, even one whose record says it ended: a job can be
        requeued after it ended (``scontrol requeue``, node failure), and slurmctld briefly shows
        odd states while it requeues.  The cached state answers only for jobs Slurm has forgotten.
        """
        from clusterkit.scheduler.arrays import indices
        from clusterkit.scheduler.slurm.arrays import slurm_array_statuses

        picked = [i for i, r in enumerate(records) if indices(r) is not None]   # arrays and their tasks
        plain = [r for i, r in enumerate(records) if i not in picked]
        try:
            known = self.query.states(r.job_id for r in plain)
            tasks = slurm_array_statuses(self.query, [records[i] for i in picked])
        except SlurmUnreachable as exc:
            self.query.unreachable = str(exc)
            return [_stale_status(rec, str(exc)) for rec in records]
        found = dict(zip(picked, tasks, strict=True))
        return [found[i] if i in found else with_script_reason(rec, _slurm_status(rec, known.get(rec.job_id)))
                for i, rec in enumerate(records)]

    def cancel(self, rec: JobRecord, st: JobStatus, *, now: bool, on_grace: OnGrace | None = None) -> CancelOutcome:
        if st.state == JobState.RUNNING and not now:
            grace = float(rec.plan.get("grace_s", 60))
            if on_grace is not None:
                on_grace(grace)
            return CancelOutcome(True, stop_slurm(rec.job_id, grace, stop_signal(rec)))
        cancel_slurm(rec.job_id)
        return CancelOutcome(True)

    def logs(self, rec: JobRecord) -> list[Path]:
        return log_files(rec)

    def details(self, rec: JobRecord, st: JobStatus) -> JobDetails:
        from clusterkit.scheduler.slurm.steps import down_nodes, job_steps

        return JobDetails(job_steps(rec.job_id, self.query), down_nodes(st.nodes, self.query) if st.nodes else [])


# --------------------------------------------------------------------------- status


def _stale_status(rec: JobRecord, why: str) -> JobStatus:
    """What is known here about a Slurm job while slurmctld does not answer."""
    code = read_result_file(rec.result_file)
    if code is not None:  # the job script wrote its exit status: it ended for good
        return replace(status_from_result(code, rec), stale=True)
    if rec.state is not None and rec.state.is_terminal:
        return replace(cached_status(rec), stale=True)
    return JobStatus(state=JobState.UNKNOWN, reason=why, source="none", stale=True)


def _slurm_status(rec: JobRecord, st: JobStatus | None) -> JobStatus:
    return settle(rec, st, read_result_file(rec.result_file))


# --------------------------------------------------------------------------- submit


def _executor(run_dir: Path, script_text: str) -> SlurmExecutor:
    """A submitit SlurmExecutor that submits ``script_text``, unchanged."""
    from submitit.slurm.slurm import SlurmExecutor


    class ScriptSlurmExecutor(SlurmExecutor):
        def _make_submission_file_text(self, command: str, uid: str) -> str:
            return script_text

        def _num_tasks(self) -> int:
            return 1  # one result per job: the batch script's exit status, not one per rank

    return ScriptSlurmExecutor(run_dir, max_num_timeout=0)


def _sbatch_reason(stderr: str) -> str:
    """The most specific line of sbatch's stderr, without the ``sbatch: error:`` prefixes."""
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    if not lines:
        return "sbatch failed without a message"
    for ln in lines:  # "Batch job submission failed: <reason>" is Slurm's own verdict
        if "submission failed:" in ln:
            return ln.split("submission failed:", 1)[1].strip()
    return re.sub(r"^(sbatch: )?(error: )?", "", lines[-1])


def submit_slurm(run_dir: Path, script_text: str) -> str:
    """sbatch ``script_text`` (the rendered job.sbatch) from ``run_dir``; return the job id.

    Raises SubmitError with Slurm's own reason when sbatch refuses the job or slurmctld is
    unreachable.  The job's working directory is the caller's, as with a plain ``sbatch``.
    """
    from submitit.core.utils import FailedJobError

    try:
        executor = _executor(run_dir, script_text)
    except RuntimeError as exc:  # submitit checks for srun on PATH
        raise SlurmUnreachable(f"cannot submit to Slurm from this machine: {exc}") from None
    swallowed = io.StringIO()  # submitit prints sbatch's stderr itself; we report one line
    try:
        with contextlib.redirect_stderr(swallowed), contextlib.redirect_stdout(swallowed):
            job = executor._submit_command("")  # no pickled function: the script is the job
    except FailedJobError as exc:
        _drop_temp_files(run_dir)
        reason = _sbatch_reason(str(exc))
        if UNREACHABLE.search(str(exc)):
            raise SlurmUnreachable(f"cannot reach Slurm controller: {reason}") from None
        raise SubmitError(f"sbatch refused the job: {reason}") from None
    except FileNotFoundError:
        _drop_temp_files(run_dir)
        raise SlurmUnreachable("cannot submit to Slurm: sbatch is not on PATH") from None
    _drop_temp_files(run_dir)  # submitit leaves a symlink to <job id>_submission.sh behind
    job_id = str(job.job_id)
    if not is_job_id(job_id):
        raise SubmitError(f"sbatch answered {job_id[:80]!r}, not a job id; see `squeue --me` for "
                          "what was submitted")
    return job_id


def tag_job(job_id: str, comment: str, run: slurmclient.Run = slurmclient.run) -> str | None:
    """Set the job's comment (the run tag of a job whose run name holds its own id, so it could not
    be written in job.sbatch); None when set, else why not, in one line."""
    answer = run(["scontrol", "update", f"JobId={job_id}", f"Comment={comment}"], 30)
    if answer.returncode == 0:
        return None
    return slurmclient.unreachable(answer) or f"scontrol update failed (exit {answer.returncode}): " \
        f"{last_line(answer.stderr)}"


def _drop_temp_files(run_dir: Path) -> None:
    for tmp in run_dir.glob(".submission_file_*.sh"):
        tmp.unlink(missing_ok=True)


# --------------------------------------------------------------------------- cancel


def _scancel(args: list[str], *, tolerate_ended: bool) -> None:
    """Run ``scancel ARGS``; SubmitError (one line) when Slurm is unreachable or refuses.

    ``tolerate_ended``: a job that ended meanwhile ("already completing or completed") is fine.
    """
    proc = slurmclient.run(["scancel", *args], 60)
    if proc.returncode == 0 or (tolerate_ended and "already completing or completed" in proc.stderr):
        return
    if proc.returncode == slurmclient.NOT_FOUND:
        raise SlurmUnreachable("cannot cancel: scancel is not on PATH")
    unreachable = slurmclient.unreachable(proc)
    if unreachable is not None:
        raise SlurmUnreachable(unreachable)
    raise SubmitError(f"scancel {' '.join(args)} failed: {_sbatch_reason(proc.stderr)}")


def cancel_slurm(job_id: str) -> None:
    """scancel the job (a no-op for a finished one); SubmitError if Slurm is unreachable."""
    _scancel(["--", job_id], tolerate_ended=False)


def _ranks_running(job_id: str) -> bool:
    """Whether any job step other than the batch shell's is still running (squeue -s)."""
    proc = slurmclient.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i"], 60)
    if proc.returncode != 0:
        # the job is gone, or Slurm cannot say (no answer, no squeue): stop waiting, the
        # scancel that follows reports what is wrong
        return False
    steps = [s for s in proc.stdout.split() if not s.endswith((".batch", ".extern"))]
    return bool(steps)


_STOP_SIGNALS = ("TERM", "USR1", "USR2", "INT")


def stop_signal(rec: JobRecord) -> str:
    """The signal the job's ranks get to save (``--set stop_signal``, recorded in its plan)."""
    settings = rec.plan.get("settings")
    given = settings.get("stop_signal") if isinstance(settings, dict) else None
    return given if given in _STOP_SIGNALS else "TERM"


def stop_slurm(job_id: str, grace_s: float, signal: str = "TERM", poll_s: float = 0.5) -> float:
    """Let the ranks save, then cancel: ``signal`` (the job's stop signal) to the job's steps, up
    to ``grace_s`` for them to end, then ``scancel``.  Returns the seconds waited.

    The batch shell is told first (``--batch``: the shell only, never srun, which would answer
    TERM by killing every task): then it neither writes a result nor requeues the job when the
    ranks exit.  ``--signal`` without ``--batch`` reaches every task of the running steps
    and their children (torchrun's and deepspeed's workers), not the batch shell.  A framework
    that requeues on its signal (``requeue_by=framework``) is overruled by the final scancel,
    which cancels a requeued job too.
    """
    _scancel(["--batch", "--signal=TERM", "--", job_id], tolerate_ended=True)
    _scancel([f"--signal={signal}", "--", job_id], tolerate_ended=True)
    start = time.monotonic()
    while time.monotonic() - start < grace_s and _ranks_running(job_id):
        time.sleep(poll_s)
    waited = time.monotonic() - start
    cancel_slurm(job_id)
    return waited
