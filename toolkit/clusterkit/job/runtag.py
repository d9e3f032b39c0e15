"""The run tag: each Slurm job of a run carries ``--comment=clusterkit-run:<run name>``, so Slurm's
accounting groups a run's attempts, requeues and chain members (docs/jobs.md, "What a run cost").

Why ``--comment`` and not ``--wckey``: a wckey is an accounting association.  Where a site tracks
them (``TrackWCKey``) and enforces them (``AccountingStorageEnforce=wckeys``), sbatch refuses a job
whose wckey an administrator has not added for the user, and where a site does not track them,
the wckey is dropped; both need an administrator, and one key per run would fill the association
table.  A comment never stops a job; sacct shows it where the site's slurm.conf has
``AccountingStoreFlags=job_comment`` (Slurm 21.08 and later), and ``status --run`` says so where it
does not (it then counts the jobs clusterkit recorded, found by id).  A comment the user sets
(``--sbatch comment=...``) is refused: the option is clusterkit's.  Pure.
"""

from __future__ import annotations

from clusterkit.job.longrun import RUN_NAME

PREFIX = "clusterkit-run:"


def tag(run_name: str) -> str:
    """The comment every Slurm job of run ``run_name`` carries."""
    return PREFIX + run_name


def run_of(comment: str) -> str | None:
    """The run name a job's comment (as sacct prints it) tags, or None: not a clusterkit run tag."""
    text = comment.strip()
    if not text.startswith(PREFIX):
        return None
    name = text[len(PREFIX):]
    return name if RUN_NAME.fullmatch(name) else None
