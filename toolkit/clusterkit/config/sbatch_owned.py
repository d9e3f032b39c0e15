"""The ``#SBATCH`` options clusterkit writes itself: a site's ``scheduler.sbatch`` and a job's
``--sbatch`` may not set them (docs/architecture.md §3), by sbatch's own option table."""

from __future__ import annotations

from clusterkit.config.sbatch_options import meanings

#: ``#SBATCH`` options clusterkit writes itself, and where a site or user sets them instead.
OWNED_SBATCH = {
    "job-name": "--job-name", "nodes": "--nodes (or the stage)", "ntasks": "--launcher (it decides the tasks)",
    "ntasks-per-node": "--launcher (it decides the tasks)", "ntasks-per-core": "--launcher (it decides the tasks)",
    "ntasks-per-socket": "--launcher (it decides the tasks)", "ntasks-per-gpu": "--launcher (it decides the tasks)",
    "ntasks-per-tres": "--launcher (it decides the tasks)",
    "tres-per-task": "--set cpus_per_task=N and --gpus-per-node",
    "gpus-per-node": "--gpus-per-node", "gpus": "--gpus-per-node", "gpus-per-task": "--gpus-per-node",
    "gpus-per-socket": "--gpus-per-node", "cpus-per-task": "--set cpus_per_task=N",
    "partition": "scheduler.partition", "account": "scheduler.account", "qos": "scheduler.qos",
    "time": "scheduler.time", "output": "--out (logs go to the run directory)",
    "error": "--out (logs go to the run directory)", "input": "the training command",
    "open-mode": "scheduler.max_restarts (requeued runs append to their log)", "signal": "scheduler.preempt_signal_s",
    "requeue": "scheduler.max_restarts", "no-requeue": "scheduler.max_restarts: 0",
    "chdir": "--out (jobs run in their run directory)", "export": "nccl.env",
    "export-file": "nccl.env", "get-user-env": "nccl.env", "wrap": "the command after '--'",
    "exclude": "--exclude", "parsable": "submit --json (clusterkit reads sbatch's answer itself)",
    "wait": "submit --wait", "test-only": "submit --dry-run", "array": "submit --array or --sweep",
    "comment": "--run-name (the comment is the run tag Slurm's accounting groups the run's jobs by)",
    "dependency": "submit --after JOB or --chain N",
    "kill-on-invalid-dep": "submit --after JOB (set with it)",
    "switches": "network.topology.max_switches (and max_wait)", "segment": "network.topology.segment",
}


def owned_sbatch(key: str) -> str | None:
    """The option of :data:`OWNED_SBATCH` that sbatch option ``key`` sets, if any, by sbatch's own
    option table (:mod:`clusterkit.config.sbatch_options`): an alias (``tasks-per-node`` is
    ``ntasks-per-node``) or an abbreviation, which getopt_long takes (``--out`` is ``--output``); a
    prefix several options share is owned when any of them is (sbatch would refuse it anyway)."""
    return (next((name for name in meanings(key) if name in OWNED_SBATCH), None)
            or next((name for name in OWNED_SBATCH if name.startswith(key)), None))
