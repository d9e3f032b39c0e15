"""The local scheduler (``scheduler.kind: local``): the rendered script runs on this machine.

submitit's local controller (``python -m submitit.local._local``) runs ``bash job.sbatch``
once, with the site's time limit; the launcher inside the script (``torchrun --standalone``)
starts the N worker processes.  The controller's pid is the job id, and the script (seeing
``SUBMITIT_LOCAL_JOB_ID``) writes the same result file as on Slurm.  The controller's capture of
the script's output is ``<job id>_0_log.out`` / ``.err`` in the run directory.

Status is the result file, else whether the controller still lives; cancel is SIGTERM to the
controller, which forwards it to the script.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from clusterkit.scheduler.base import (
    CancelOutcome,
    JobDetails,
    JobStatus,
    OnGrace,
    cached_status,
    status_from_result,
    with_script_reason,
)
from clusterkit.scheduler.logs import log_files
from clusterkit.scheduler.results import read_result_file
from clusterkit.vocab import JobState, SchedulerKind, slurm_minutes

if TYPE_CHECKING:
    from clusterkit.rundir import RenderedRun
    from clusterkit.scheduler.records import JobRecord



class LocalScheduler:
    kind: SchedulerKind = "local"

    def submit(self, run: RenderedRun) -> str:
        # the controller's warning (USR2) comes scheduler.preempt_signal_s before the time limit, as
        # Slurm's --signal: the supervisor's grace time (shorter) ends, and the result is written, first
        signal_s = run.plan.basis.site.scheduler.preempt_signal_s
        return submit_local(run.run_dir, run.script, slurm_minutes(run.plan.time), signal_s)

    def status(self, records: Sequence[JobRecord]) -> list[JobStatus]:
        return [cached_status(r) if r.state is not None and r.state.is_terminal else local_status(r) for r in records]

    def cancel(self, rec: JobRecord, st: JobStatus, *, now: bool, on_grace: OnGrace | None = None) -> CancelOutcome:
        return CancelOutcome(cancel_local(rec))

    def logs(self, rec: JobRecord) -> list[Path]:
        return log_files(rec)

    def details(self, rec: JobRecord, st: JobStatus) -> JobDetails:
        return JobDetails([], [])   # no steps, no node states: the job ran on this machine


def submit_local(run_dir: Path, script: Path, timeout_min: float, signal_delay_s: int) -> str:
    """Start the rendered script on this machine; return the job id (the controller's pid).

    Same environment contract as ``submitit.local.local.start_controller``, with two changes:
    the controller's streams go to ``local-controller.log`` (inheriting ours, a
    ``clusterkit submit ... | cat`` would wait for the job's end), and the controller runs in
    its own session (a Ctrl-C meant for clusterkit spares the job).
    """
    folder = Path(run_dir).expanduser().absolute()
    env = dict(os.environ)
    env.update(
        SUBMITIT_LOCAL_NTASKS="1", SUBMITIT_LOCAL_COMMAND=shlex.join(["bash", str(script)]),
        SUBMITIT_LOCAL_TIMEOUT_S=str(int(60 * timeout_min)), SUBMITIT_LOCAL_SIGNAL_DELAY_S=str(signal_delay_s),
        SUBMITIT_LOCAL_NODEID="0", SUBMITIT_LOCAL_JOB_NUM_NODES="1", SUBMITIT_STDERR_TO_STDOUT="",
        SUBMITIT_EXECUTOR="local", SUBMITIT_LOCAL_WITH_SHELL="",
    )
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "local-controller.log", "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "submitit.local._local", str(folder)],
                                   env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   start_new_session=True)
    return str(process.pid)


def local_status(rec: JobRecord) -> JobStatus:
    """A local job's state: its result file, else whether its controller process still lives."""
    code = read_result_file(rec.result_file)
    if code is not None:
        return with_script_reason(rec, status_from_result(code, rec))
    if rec.host != socket.gethostname():  # its pid means nothing here
        return JobStatus(state=JobState.UNKNOWN, reason=f"local job of host {rec.host}; ask there", source="none")
    if _local_alive(rec.job_id):
        return JobStatus(state=JobState.RUNNING, source="process")
    if rec.cancel_requested:
        return JobStatus(state=JobState.CANCELLED, source="record")
    return JobStatus(state=JobState.LOST, reason="process gone without a result file", source="process")


def _local_alive(pid_text: str) -> bool:
    """Whether ``pid_text`` is a running submitit local controller (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{int(pid_text)}/cmdline").read_bytes()
        stat = Path(f"/proc/{int(pid_text)}/stat").read_text()
    except (OSError, ValueError):
        return False
    return b"submitit.local._local" in cmdline and stat.rsplit(")", 1)[-1].split()[0] != "Z"


def cancel_local(rec: JobRecord) -> bool:
    """SIGTERM a local job's controller (it forwards the signal to the job script)."""
    if not _local_alive(rec.job_id):
        return False
    os.kill(int(rec.job_id), signal.SIGTERM)
    return True
