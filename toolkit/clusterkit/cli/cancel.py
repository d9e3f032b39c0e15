"""``clusterkit cancel JOB...``: every JOB checked first, then each cancelled in turn (the ranks
get SIGTERM and the site's grace time first, unless --now)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from clusterkit.cli.jobs import _find

if TYPE_CHECKING:
    from clusterkit.api import Job


@click.command()
@click.argument("refs", metavar="JOB...", nargs=-1, required=True)
@click.option("--now", is_flag=True, help="Cancel at once: no SIGTERM and grace time for the ranks first.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the result as JSON (one object; a list of them for several JOBs).")
def cancel(refs: tuple[str, ...], now: bool, as_json: bool) -> int:
    """Cancel jobs (running or pending); a job Slurm reports as ended is left alone.

    Every JOB is checked first: if one names no job record, none is cancelled.  The jobs are
    then cancelled one after another, in the order given.

    When the Slurm controller does not answer, the job's state is unknown, not ended, so
    scancel is still tried (it is harmless for a job that has in fact ended).

    A running Slurm job's ranks get SIGTERM first and up to the site's scheduler.grace_s
    seconds to save and exit; then the job is cancelled.  A cancelled job is never requeued.

    JOB is a job id as `submit` printed it, or SITE:JOB_ID.
    """
    from clusterkit.cli.login import forward_job

    if (fwd := forward_job("cancel", refs)) is not None:
        return fwd
    from clusterkit.cli import output
    from clusterkit.errors import RecordError

    found: dict[str, Job] = {}
    bad: list[RecordError] = []
    for ref in refs:  # every JOB checked before any is cancelled
        try:
            job = _find(ref)
        except RecordError as exc:
            bad.append(exc)
            continue
        found.setdefault(job.key, job)
    if bad and len(refs) > 1:
        more = f" (and {len(bad) - 1} more bad JOB(s))" if len(bad) > 1 else ""
        raise type(bad[0])(f"{bad[0]}{more}; nothing cancelled")
    if bad:
        raise bad[0]
    results = [_cancel_one(job, now, as_json) for job in found.values()]
    if as_json:
        output.emit_json(results[0] if len(refs) == 1 else results)
    return 0


def _cancel_one(found: Job, now: bool, as_json: bool) -> dict[str, object]:
    from clusterkit.cli import output

    def on_grace(grace: float) -> None:
        if not as_json:
            output.info(f"clusterkit: SIGTERM to the ranks of job {found.id}; up to {grace:g} s for them to save")

    done = found.cancel(now, on_grace=on_grace)
    rec, before, waited = done.record, done.state_before, done.grace_waited_s
    if done.unrecorded is not None:
        output.warn(f"job {rec.job_id} was cancelled, but its record could not be updated: {done.unrecorded}")
    if not as_json:
        if done.cancelled:
            saved = "" if waited is None else f"; the ranks had {waited:.1f} s to save"
            output.line(f"Cancelled job {rec.job_id} (was {before}){saved}.")
        else:
            output.line(f"Job {rec.job_id} already ended ({before}); nothing to cancel.")
    return {"job": rec.key, "cancelled": done.cancelled, "state_before": before.value,
            "grace_waited_s": None if waited is None else round(waited, 1)}
