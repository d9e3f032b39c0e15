"""``submit``'s options for runs longer than one job: ``--after``, ``--chain``, ``--run-name``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from clusterkit.cli import common
from clusterkit.config.job_options import BY_NAME

if TYPE_CHECKING:
    from clusterkit.api import Job, Plan
    from clusterkit.scheduler.records import JobRecord

F = Callable[..., Any]


def long_run_options(f: F) -> F:
    decorators: list[Callable[[F], F]] = [
        click.option("--after", default=None, metavar="JOB[:ok|any]",
                     help="Start once JOB (a Slurm job id, or SITE:JOB_ID) ended successfully (:ok, the default) "
                          "or at all (:any): #SBATCH --dependency."),
        click.option("--chain", type=click.IntRange(min=2, max=100), default=None, metavar="N",
                     help="Queue N jobs, each starting after the one before ended (afterany), all resuming "
                          "from one checkpoint directory; a member that fails for a reason a restart cannot fix "
                          "(doctor: user code, launcher config, imports) cancels the rest."),
        common.option(BY_NAME["run_name"]),
    ]
    for d in reversed(decorators):
        f = d(f)
    return f


def dry_run_plan(planned: Plan, after: str | None, chain: int | None) -> Plan:
    """What ``--dry-run`` renders: the job (the first member of a chain) with its dependency."""
    from clusterkit.api import Plan as ApiPlan
    from clusterkit.diagnose.catalogue import NOT_FIXED_BY_RESTART
    from clusterkit.job.longrun import ChainLink, parse_after

    request = planned.request
    if after is not None:
        request = replace(request, dependency=parse_after(after).dependency)
    if chain is not None:
        request = replace(request, chain=ChainLink(1, chain, ids_file="", unfixable=NOT_FIXED_BY_RESTART))
    return ApiPlan(planned.site, request)


def dry_run_note(chain: int | None) -> str | None:
    if chain is None:
        return None
    return (f"this is member 1 of {chain}; members 2-{chain} are the same job with "
            "#SBATCH --dependency=afterany:<the member before> and member 1's run name")


def show_chain(jobs: list[Job], as_json: bool, show_one: Callable[[JobRecord, bool], None]) -> int:
    """The queued chain: one line per member (or one JSON object with them all)."""
    from clusterkit.cli import output

    if as_json:
        output.emit_json({"chain": [{"job": j.record.key, "job_id": j.record.job_id, "run_dir": j.record.run_dir,
                                     "run_name": _run_name(j.record), "state": "SUBMITTED"} for j in jobs]})
        return 0
    first = jobs[0].record
    output.line(f"Queued a chain of {len(jobs)} jobs, each after the one before; run name {_run_name(first)}")
    for k, job in enumerate(jobs, 1):
        rec = job.record
        after = f", after {jobs[k - 2].record.job_id}" if k > 1 else ""
        output.line(f"  {k}. job {rec.job_id}{after}: {rec.run_dir}")
        if job.unsaved is not None:
            output.warn(f"job {rec.job_id} is submitted, but its record was not saved: {job.unsaved}")
        if job.untagged is not None:
            output.warn(f"job {rec.job_id} is submitted without its run tag ({job.untagged})")
    ref = first.job_id if re.fullmatch(r"\d+", first.job_id) else first.key
    output.line(f"  their states: clusterkit status (each: clusterkit status {ref})")
    return 0


def _run_name(rec: JobRecord) -> str:
    from clusterkit.chain import run_name_of

    return run_name_of(rec)
