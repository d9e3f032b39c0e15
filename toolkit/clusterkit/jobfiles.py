"""The files a job leaves in its run directory for clusterkit's Python to read, each named once.

Both sides take the names from here: the Python side (status, logs, doctor, recovery, the
supervisor) through :class:`JobFile` and the helpers below, the job script through the render
context (``jobfiles``, :func:`template_names`; templates/job-*.j2 hold no file name of their own),
so a rename here changes both.  A test fails where a template or a module restates one
(tests/render/test_jobfiles.py).  Nothing here does I/O.

Each file in the run directory, who writes it and who reads it:

==================================  ====================================  ======================================
file                                written by                            read by
==================================  ====================================  ======================================
``<job>.result``: exit status       job-lib.sh.j2 ``ck_result`` (the      scheduler.results (status, ``wait``,
(as ``<job>.result.tmp``, moved)    job's start); supervise.endgame       the records' ``result_file``)
``<job>.reason``: why, one line     job-lib.sh.j2; supervise.endgame      scheduler.base ``with_script_reason``
``<job>.unfixable``: a category     supervise.endgame; job-chain.sbatch   the next member (job-chain.sbatch.j2)
``<job>.teardown``: ``N STATUS``    supervise.teardown                    scheduler.results
``logs/<job>.progress`` (``.log``)  the training (heartbeat), at          supervise.watch, status, api.account
                                    job-environment.j2's CK_PROGRESS_FILE
``logs/preflight-<job>.r<N>.json``  supervise.start (in-job preflight)    preflight.choose (``choose-nodes``)
``logs/nodes-<job>.r<N>.json``      preflight.choose (the node choice)    status, supervise.recovery
``logs/.chosen-<job>.r<N>``         supervise.start (its stdout)          job-preflight.sbatch.j2 (the hosts)
``logs/attempts-<job>.r<N>.json``   supervise.attempts                    status, history
``logs/slurm-<job>.out``            Slurm: job-header.sbatch.j2 output    scheduler.logs (the batch log first)
``logs/<job>.r<N>.<who>.out``       srun: script_parts, replan            supervise.recovery, scheduler.logs
(``.a<M>.`` after the first)        (``--output``)                        (doctor on one attempt's logs)
``chain.ids``: the members' ids     chain (once all are queued)           job-chain.sbatch.j2, supervise.endgame
==================================  ====================================  ======================================

And the reverse way, written by clusterkit (job.render) and read by the job script:
``hostfile`` (the launcher's hosts; the job writes its own over it, job-hosts.*.j2) and
``rendezvous-host.sh`` (network.rendezvous_host: the rendezvous host of a head node).

``<job>`` is the job id as the job names itself (``CK_JOB_ID``: an array task's ``ARRAYJOB_TASK``);
``<N>`` the restart (``SLURM_RESTART_COUNT``), ``<M>`` the attempt inside one allocation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: the run directory's folder of logs and per-restart reports
LOGS = "logs"
#: what a restart's number follows in a per-restart name (``<job>.r<N>``)
RESTART = ".r"
#: what an attempt's number follows in a rank log's name after the first (``<job>.r0.a1.node3.out``)
ATTEMPT = "a"
#: a rank log's (and the batch log's) ending
LOG_END = ".out"
#: the temporary name a file is written under before it is renamed into place
TMP = ".tmp"
#: what the training's progress log (its marks) adds to the progress file's name (heartbeat)
MARKS = ".log"
#: each rank's own file beside the progress file: ``<job>.progress<kind>.rank<R>``, whose kind is
#: "" (its beats: heartbeat), :data:`STACK` (its stack dumps: stackdump) or :data:`PYSPY` (py-spy's)
RANK, STACK, PYSPY = ".rank", ".stack", ".pyspy"
#: the hostfile of the job's hosts (a job array's: in each task's folder)
HOSTFILE = "hostfile"
#: the script that names the rendezvous host of a head node (site network.rendezvous_host)
RENDEZVOUS_HOST = "rendezvous-host.sh"
#: the chain's ids file (one job id a line, the members in order)
CHAIN_IDS = "chain.ids"
#: the job script's own names for its run directory, its job id and its restart
SHELL_RUN_DIR, SHELL_JOB, SHELL_RESTART = "$CK_RUN_DIR", "$CK_JOB_ID", "$ck_restarts"


@dataclass(frozen=True)
class JobFile:
    """One file of a job: ``[logs/]<prefix><job>[.r<restart>]<suffix>`` in its run directory."""

    prefix: str
    suffix: str
    in_logs: bool = False
    per_restart: bool = False

    def name(self, job: str, restart: int | str | None = None) -> str:
        """Its file name for ``job`` (and ``restart``, where it has one); placeholders (``<job>``) or
        shell words (``$CK_JOB_ID``) as well as values."""
        if self.per_restart != (restart is not None):
            raise ValueError(f"{self.prefix}<job>{self.suffix}: a restart is {'' if self.per_restart else 'not '}"
                             "part of its name")
        return f"{self.prefix}{job}{'' if restart is None else f'{RESTART}{restart}'}{self.suffix}"

    def relative(self, job: str, restart: int | str | None = None) -> str:
        """Its path inside the run directory (``logs/...`` where it lies there)."""
        return f"{LOGS}/{self.name(job, restart)}" if self.in_logs else self.name(job, restart)

    def path(self, run_dir: str | Path, job: str, restart: int | None = None) -> Path:
        return Path(run_dir) / self.relative(job, restart)

    def shell(self, job: str = SHELL_JOB, restart: str | None = None) -> str:
        """Its path as the job script writes it (inside double quotes)."""
        return f"{SHELL_RUN_DIR}/{self.relative(job, restart)}"

    @property
    def doc(self) -> str:
        """Its name as the script's comments and the docs write it (``<job id>.result``,
        ``logs/nodes-<job>.r<restart>.json``)."""
        return self.relative("<job>", "<restart>") if self.per_restart else self.relative("<job id>")

    def restarts(self, job: str) -> re.Pattern[str]:
        """The names of ``job``'s files of this kind, one per restart (group 1: the restart)."""
        return re.compile(re.escape(self.prefix + job + RESTART) + r"([0-9]{1,6})" + re.escape(self.suffix))


RESULT = JobFile("", ".result")
REASON = JobFile("", ".reason")
UNFIXABLE = JobFile("", ".unfixable")
TEARDOWN = JobFile("", ".teardown")
PROGRESS = JobFile("", ".progress", in_logs=True)
PROGRESS_LOG = JobFile("", PROGRESS.suffix + MARKS, in_logs=True)
PREFLIGHT_REPORT = JobFile("preflight-", ".json", in_logs=True, per_restart=True)
NODE_CHOICE = JobFile("nodes-", ".json", in_logs=True, per_restart=True)
CHOSEN = JobFile(".chosen-", "", in_logs=True, per_restart=True)
ATTEMPTS = JobFile("attempts-", ".json", in_logs=True, per_restart=True)
BATCH_LOG = JobFile("slurm-", LOG_END, in_logs=True)

#: every file above by the name the render context gives it
FILES: dict[str, JobFile] = {
    "result": RESULT, "reason": REASON, "unfixable": UNFIXABLE, "teardown": TEARDOWN, "progress": PROGRESS,
    "progress_log": PROGRESS_LOG,
    "preflight_report": PREFLIGHT_REPORT, "node_choice": NODE_CHOICE, "chosen": CHOSEN, "attempts": ATTEMPTS,
    "batch_log": BATCH_LOG,
}


def logs(run_dir: str | Path) -> Path:
    """The run directory's folder of logs."""
    return Path(run_dir) / LOGS


def rank_log(job: str, restart: str, who: str, attempt: int = 0) -> str:
    """A launch step's log, inside ``logs``: ``<job>.r<restart>.<who>.out``, and after the first
    attempt in one allocation ``<job>.r<restart>.a<attempt>.<who>.out``."""
    return f"{job}{RESTART}{restart}.{f'{ATTEMPT}{attempt}.' if attempt else ''}{who}{LOG_END}"


def rank_logs(job: str, restart: int, attempt: int) -> re.Pattern[str]:
    """The names of one attempt's rank logs (:func:`rank_log`)."""
    head = re.escape(f"{job}{RESTART}{restart}.")
    end = re.escape(LOG_END)
    return re.compile(rf"{head}{ATTEMPT}{attempt}\..+{end}" if attempt else rf"{head}(?!{ATTEMPT}[0-9]+\.).+{end}")


def rank_files(kind: str = "") -> re.Pattern[str]:
    """The names of each rank's files of ``kind`` (:data:`RANK`): groups ``job`` and ``rank``."""
    return re.compile(rf"^(?P<job>[0-9A-Za-z_.-]+){re.escape(PROGRESS.suffix + kind + RANK)}(?P<rank>\d{{1,7}})$")


#: a rank log's restart tag and any attempt tag after it, in an srun ``--output`` (group 1: the restart tag)
ATTEMPT_TAG = re.compile(rf"({re.escape(RESTART)}[0-9]+\.)(?:{ATTEMPT}[0-9]+\.)?(?=[^/]*$)")


def template_names() -> dict[str, str]:
    """The names the job script's templates use (the render context's ``jobfiles``): paths as the
    script writes them (``"$CK_RUN_DIR/$CK_JOB_ID.result"``), and ``<name>_doc`` as its comments do."""
    names = {key: f.shell() for key, f in FILES.items() if not f.per_restart and key != "batch_log"}
    names |= {f"{key}_doc": f.doc for key, f in FILES.items()}
    names |= {
        "logs": f"{SHELL_RUN_DIR}/{LOGS}",
        "result_tmp": RESULT.shell() + TMP,
        "unfixable_end": UNFIXABLE.suffix,
        "chosen": CHOSEN.shell("$SLURM_JOB_ID", SHELL_RESTART),
        "chain_ids": f"{SHELL_RUN_DIR}/{CHAIN_IDS}",
        "hostfile": f"{SHELL_RUN_DIR}/{HOSTFILE}", "hostfile_name": HOSTFILE,
        "rendezvous_host": f"{SHELL_RUN_DIR}/{RENDEZVOUS_HOST}", "rendezvous_host_name": RENDEZVOUS_HOST,
        "batch_log": BATCH_LOG.relative("%j"),
        "array_batch_log": BATCH_LOG.relative("%A_%a"),
    }
    return names
