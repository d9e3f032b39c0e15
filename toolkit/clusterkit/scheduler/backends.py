"""Submission through submitit, with our rendered ``job.sbatch`` as the one truth.

This is the only module that imports submitit.

**Slurm.**  :class:`ScriptSlurmExecutor` is a ``submitit.SlurmExecutor`` whose submission file
text is the rendered ``job.sbatch``, byte for byte (``_make_submission_file_text`` returns it
unchanged), so no second place emits ``#SBATCH`` lines and ``submit --dry-run`` shows exactly
what sbatch receives.  submitit still does what it is good at: writes the submission file into
the run directory (the submitit folder), runs ``sbatch``, parses the job id, keeps
``<job id>_submission.sh``, and hands back a job object that can be polled and cancelled.

**Result files.**  submitit's own result file is a pickle written by
``python -m submitit.core._submit`` after calling a pickled function.  Our script runs a
shell command (torchrun, deepspeed, srun ...), not a pickled function, so we submit with
``_submit_command`` (no pickle is written) and the script itself writes the result file:
``<run dir>/<job id>.result``, one line holding its exit status, written only when the job
ends for good (never when it requeues itself).  :class:`ScriptSlurmJob` overrides ``done()``
and the outcome reader to use that file, so ``job.result()`` returns the exit status.  A job
killed before it could write the file (scancel, node failure, time limit, OOM) is decided by
the scheduler's state instead: ``done()`` asks :class:`clusterkit.scheduler.records.SlurmQuery` (squeue,
then sacct, then scontrol when sacct fails), so it never waits forever on a site without
sacct, where submitit's own watcher only ever sees UNKNOWN.

**Requeue.**  submitit's requeue machinery lives inside its Python job runner (signal
handlers calling ``checkpoint()``), which our script does not run.  Instead the rendered
script traps the time-limit warning (``--signal=B:USR2@T``), sends TERM to the ranks through
their job steps (``scancel --signal=TERM``; never to srun, which would SIGKILL them), gives
them ``scheduler.grace_s``, and calls ``scontrol requeue`` while ``SLURM_RESTART_COUNT`` is
under the site's budget; a preempted run (``PreemptTime`` set) is requeued the same way.  The
job keeps its id across restarts, so the job record, the submitit job object and the logs
(``--open-mode=append``) stay valid; the restart count is read from scontrol by ``status``.

**Local sites** (``scheduler.kind: local``) use submitit's ``LocalExecutor``: its controller
process runs the same rendered script with ``bash``, once; the launcher inside the script
(``torchrun --standalone``) starts the N worker processes.  The controller's pid is the job id,
and the script (seeing ``SUBMITIT_LOCAL_JOB_ID``) writes the same result file.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from submitit.core import utils as submitit_utils
from submitit.local.local import LocalExecutor, LocalJob
from submitit.slurm.slurm import SlurmExecutor, SlurmJob

from clusterkit.errors import SubmitError
from clusterkit.scheduler.records import SlurmQuery, read_result_file, result_file

# sbatch's stderr when slurmctld is down (after its own retries, about 9 s)
_UNREACHABLE = re.compile(r"Unable to contact slurm controller|Could not establish a configuration source"
                          r"|Unable to process configuration file|Connection refused", re.I)


def _outcome(code: int) -> tuple[str, Any]:
    return ("success", code) if code == 0 else ("error", f"job script exited with status {code}")


class ScriptSlurmJob(SlurmJob):  # type: ignore[type-arg,unused-ignore]
    """A Slurm job whose result is its script's exit status (see the module docstring)."""

    def done(self, force_check: bool = False) -> bool:
        if read_result_file(result_file(self.paths.folder, self.job_id)) is not None:
            return True
        st = SlurmQuery(timeout_s=60).states([self.job_id]).get(self.job_id)
        return st is None or st.terminal  # None: Slurm forgot it, so it is not running

    def _get_outcome_and_result(self) -> tuple[str, Any]:
        code = read_result_file(result_file(self.paths.folder, self.job_id))
        if code is None:
            st = SlurmQuery(timeout_s=60).states([self.job_id]).get(self.job_id)
            state = st.state if st else "LOST"
            raise submitit_utils.UncompletedJobError(
                f"job {self.job_id} ended ({state}) without writing {result_file(self.paths.folder, self.job_id)}")
        return _outcome(code)


class ScriptSlurmExecutor(SlurmExecutor):
    """A SlurmExecutor that submits one given script text, unchanged."""

    job_class = ScriptSlurmJob

    def __init__(self, folder: Path, script_text: str) -> None:
        super().__init__(folder, max_num_timeout=0)
        self._script_text = script_text

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        return self._script_text

    def _num_tasks(self) -> int:
        return 1  # one result per job: the batch script's exit status, not one per rank


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
    try:
        executor = ScriptSlurmExecutor(run_dir, script_text)
    except RuntimeError as exc:  # submitit checks for srun on PATH
        raise SubmitError(f"cannot submit to Slurm from this machine: {exc}") from None
    swallowed = io.StringIO()  # submitit prints sbatch's stderr itself; we report one line
    try:
        with contextlib.redirect_stderr(swallowed), contextlib.redirect_stdout(swallowed):
            job = executor._submit_command("")  # no pickled function: the script is the job
    except submitit_utils.FailedJobError as exc:
        _drop_temp_files(run_dir)
        reason = _sbatch_reason(str(exc))
        if _UNREACHABLE.search(reason):
            raise SubmitError(f"cannot reach Slurm controller: {reason}") from None
        raise SubmitError(f"sbatch refused the job: {reason}") from None
    except FileNotFoundError:
        _drop_temp_files(run_dir)
        raise SubmitError("cannot submit to Slurm: sbatch is not on PATH") from None
    _drop_temp_files(run_dir)  # submitit leaves a symlink to <job id>_submission.sh behind
    return str(job.job_id)


def _drop_temp_files(run_dir: Path) -> None:
    for tmp in run_dir.glob(".submission_file_*.sh"):
        tmp.unlink(missing_ok=True)


class ScriptLocalJob(LocalJob):  # type: ignore[type-arg,unused-ignore]
    """A local job whose result is its script's exit status."""

    def _get_outcome_and_result(self) -> tuple[str, Any]:
        code = read_result_file(result_file(self.paths.folder, self.job_id))
        if code is None:
            raise submitit_utils.UncompletedJobError(
                f"local job {self.job_id} ended without writing {result_file(self.paths.folder, self.job_id)}")
        return _outcome(code)


class ScriptLocalExecutor(LocalExecutor):
    """A LocalExecutor whose controller runs ``bash job.sbatch`` once (the launcher fans out)."""

    job_class = ScriptLocalJob

    def __init__(self, folder: Path, script: Path) -> None:
        super().__init__(folder)
        self._script = script

    @property
    def _submitit_command_str(self) -> str:
        return shlex.join(["bash", str(self._script)])


    def _submit_command(self, command: str) -> ScriptLocalJob:
        # submitit's start_controller lets the controller inherit our stdin/stdout/stderr: a
        # `clusterkit submit ... | cat` would then wait for the job's end.  Same environment
        # contract as submitit.local.local.start_controller, with the streams in a file and
        # the controller in its own session (a Ctrl-C meant for clusterkit spares the job).
        env = dict(os.environ)
        env.update(
            SUBMITIT_LOCAL_NTASKS="1", SUBMITIT_LOCAL_COMMAND=command,
            SUBMITIT_LOCAL_TIMEOUT_S=str(int(60 * self.parameters.get("timeout_min", 30))),
            SUBMITIT_LOCAL_SIGNAL_DELAY_S=str(int(self.parameters.get("signal_delay_s", 30))),
            SUBMITIT_LOCAL_NODEID="0", SUBMITIT_LOCAL_JOB_NUM_NODES="1", SUBMITIT_STDERR_TO_STDOUT="",
            SUBMITIT_EXECUTOR="local", SUBMITIT_LOCAL_WITH_SHELL="",
        )
        with open(self.folder / "local-controller.log", "ab") as log:
            process = subprocess.Popen([sys.executable, "-m", "submitit.local._local", str(self.folder)],
                                       env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                       start_new_session=True)
        return ScriptLocalJob(folder=self.folder, job_id=str(process.pid), process=process, tasks=[0])


def submit_local(run_dir: Path, script: Path, timeout_min: float) -> str:
    """Start the rendered script on this machine; return the job id (the controller's pid)."""
    executor = ScriptLocalExecutor(run_dir, script)
    executor.update_parameters(tasks_per_node=1, timeout_min=timeout_min, signal_delay_s=30)
    job = executor._submit_command(executor._submitit_command_str)
    return str(job.job_id)


def local_log_files(run_dir: Path, job_id: str) -> list[Path]:
    """The controller's capture of the script's stdout and stderr (submitit's naming)."""
    paths = submitit_utils.JobPaths(run_dir, job_id=job_id, task_id=0)
    return [paths.stdout, paths.stderr]


def cancel_slurm(job_id: str) -> None:
    """scancel the job (a no-op for a finished one); SubmitError if Slurm is unreachable."""
    try:
        proc = subprocess.run([SlurmJob._cancel_command, job_id], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise SubmitError("cannot cancel: scancel is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise SubmitError("cannot reach Slurm controller: scancel got no answer in 60s") from None
    if proc.returncode != 0:
        reason = _sbatch_reason(proc.stderr)
        if _UNREACHABLE.search(proc.stderr):
            raise SubmitError(f"cannot reach Slurm controller: {reason}")
        raise SubmitError(f"scancel {job_id} failed: {reason}")


def _scancel(args: list[str]) -> None:
    """Run ``scancel ARGS``; SubmitError (one line) when Slurm is unreachable or refuses."""
    try:
        proc = subprocess.run([SlurmJob._cancel_command, *args], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise SubmitError("cannot cancel: scancel is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise SubmitError("cannot reach Slurm controller: scancel got no answer in 60s") from None
    if proc.returncode != 0 and "already completing or completed" not in proc.stderr:  # ended meanwhile
        reason = _sbatch_reason(proc.stderr)
        if _UNREACHABLE.search(proc.stderr):
            raise SubmitError(f"cannot reach Slurm controller: {reason}")
        raise SubmitError(f"scancel {' '.join(args)} failed: {reason}")


def _ranks_running(job_id: str) -> bool:
    """Whether any job step other than the batch shell's is still running (squeue -s)."""
    try:
        proc = subprocess.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i"], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False  # cannot tell: stop waiting, the scancel that follows reports what is wrong
    if proc.returncode != 0:
        return False  # the job is gone (or Slurm cannot say): nothing left to wait for
    steps = [s for s in proc.stdout.split() if not s.endswith((".batch", ".extern"))]
    return bool(steps)


def stop_slurm(job_id: str, grace_s: float, poll_s: float = 0.5) -> float:
    """Let the ranks save, then cancel: SIGTERM to the job's steps, up to ``grace_s`` for them
    to end, then ``scancel``.  Returns the seconds waited.

    The batch shell is told first (``--batch``: the shell only, never srun, which would answer
    TERM by killing every task): then it neither writes a result nor requeues the job when the
    ranks exit.  ``--signal=TERM`` without ``--batch`` reaches every task of the running steps
    and their children (torchrun's and deepspeed's workers), not the batch shell.
    """
    _scancel(["--batch", "--signal=TERM", job_id])
    _scancel(["--signal=TERM", job_id])
    start = time.monotonic()
    while time.monotonic() - start < grace_s and _ranks_running(job_id):
        time.sleep(poll_s)
    waited = time.monotonic() - start
    cancel_slurm(job_id)
    return waited
