"""``clusterkit submit``: render, then hand job.sbatch to Slurm (or run it here on a local site)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import click

from clusterkit.cli import longrun as longrun_cli
from clusterkit.cli.common import build_request, job_options
from clusterkit.cli.longrun import long_run_options
from clusterkit.scheduler import traits
from clusterkit.vocab import PROBE_TRANSPORTS

if TYPE_CHECKING:
    from clusterkit.actions import Gate
    from clusterkit.api import RunDir
    from clusterkit.config.schema import Site
    from clusterkit.preflight.report import Report
    from clusterkit.scheduler.records import JobRecord


@click.command()
@job_options
@click.option("--dry-run", is_flag=True,
              help="Render the run directory and print job.sbatch, exactly what would be submitted; submit nothing "
                   "and contact no node (preflight does not run, so its node exclusions are not applied).")
@click.option("--wait/--no-wait", default=None,
              help="Follow the job to its end and exit with its exit status "
                   "(default: wait on local sites, return at once on Slurm sites).")
@click.option("--follow", "-f", is_flag=True,
              help="Print the job's logs as they are written until it ends (as `logs --follow`), "
                   "then its final state; exit with the job's exit status.")
@click.option("--skip-preflight", is_flag=True,
              help="Submit without checking nodes before submitting (the job's own first-step check inside its "
                   "allocation is --set preflight_in_job=false).")
@click.option("--preflight-transport", type=click.Choice(PROBE_TRANSPORTS), default=None,
              help="Check the nodes the job could get (its partition's idle and mixed nodes) before submitting, "
                   "over ssh or srun, even where the site does not set preflight.before_submit: true.")
@click.option("--spares", type=click.IntRange(min=0, max=1000), default=None, metavar="K",
              help="Allocate K nodes beyond --nodes; the job's own preflight drops bad nodes and it launches on "
                   "the best --nodes (the same as --set spares=K; needs the in-job preflight).")
@click.option("--exclude-from", "exclude_from", default=None, metavar="JOB",
              help="Keep out the nodes that job JOB's preflight dropped (added to --exclude).")
@click.option("--accept-new-host-keys", is_flag=True,
              help="Through the site's login node: store its host key when known_hosts has none (as preflight's "
                   "option; a changed key is always refused).")
@click.option("--code-upload", "code_upload", default=None, metavar="TREE", hidden=True,
              help="On the login node: snapshot the code a laptop uploaded (what a laptop's submit runs there).")
@long_run_options
def submit(site: str, stage: str | None, launcher: str | None, nodes: int | None, gpus_per_node: int | None,
           sets: tuple[str, ...], out: str | None, job_name: str | None, exclude: str | None, debug: bool,
           as_json: bool, command: tuple[str, ...], dry_run: bool, wait: bool | None, follow: bool,
           skip_preflight: bool, preflight_transport: str | None, spares: int | None, exclude_from: str | None,
           after: str | None, chain: int | None, run_name: str | None, accept_new_host_keys: bool,
           code_upload: str | None, **job_setup: Any) -> int:
    """Render a job and submit it: sbatch on Slurm sites, submitit's local executor on local ones.

    \b
    Examples:
      clusterkit submit --site local -- python examples/allreduce.py
      clusterkit submit --site testbed --nodes 4 -- python examples/allreduce.py

    Slurm receives the rendered job.sbatch byte for byte (see it with --dry-run).  Every
    submission leaves a job record; follow it with `clusterkit status`, `logs` and `cancel`.
    With --wait or --follow the exit status is the job's own.

    Long runs: --after JOB[:ok|any] waits for an earlier job; --chain N queues N jobs, each after
    the one before, resuming from one checkpoint directory; --run-name NAME names the run whose
    checkpoints CK_CHECKPOINT_DIR holds (<checkpoint storage>/checkpoints/<user>/NAME).

    Preflight: on Slurm sites the job checks its own nodes as its first step (srun, inside its
    allocation: no SSH to compute nodes needed) and starts nothing on bad ones.  Nodes are
    checked before submitting only where the site sets preflight.before_submit: true, or with
    --preflight-transport; then only the nodes the job could get are checked.
    """
    from clusterkit.actions import PreflightRefused
    from clusterkit.api import Plan, Site
    from clusterkit.api.login import through_login
    from clusterkit.cli import output

    _check_combined(follow=follow, as_json=as_json, dry_run=dry_run, wait=wait, chain=chain)
    loaded = Site.load(site)
    if code_upload is not None:
        _use_upload(code_upload, job_setup)
    elif through_login(loaded.config):   # from a laptop: the login node submits (docs/laptop.md)
        from clusterkit.cli.login import submit_remote

        return submit_remote(click.get_current_context().command, site, code_dir=job_setup.get("code"),
                             snapshot=job_setup.get("snapshot"), dry_run=dry_run, follow=follow, wait=wait,
                             as_json=as_json, accept_new_host_keys=accept_new_host_keys)
    if exclude_from:
        exclude = _exclude_from(exclude_from, exclude)
    request = build_request(stage=stage, command=command, launcher=launcher, nodes=nodes,
                            gpus_per_node=gpus_per_node, sets=sets, job_name=job_name,
                            exclude=exclude, debug=debug, job={**job_setup, "run_name": run_name},
                            extra_settings={"spares": spares} if spares is not None else None)
    if chain is not None:
        from clusterkit.chain import check_not_array

        check_not_array(request)
    planned = Plan(loaded, request)
    if dry_run:  # contacts no node: preflight's exclusions are the one thing a dry run cannot show
        run = longrun_cli.dry_run_plan(planned, after, chain).render(out, write=out is not None, submitting=True)
        _note_preflight_skipped(planned.site.config, skip_preflight)
        return _show_dry_run(run, as_json, longrun_cli.dry_run_note(chain))
    try:
        if chain is not None:
            jobs = planned.submit_chain(chain, out=out, preflight=not skip_preflight,
                                        preflight_transport=preflight_transport, on_gate=_show_gate, after=after)
            return longrun_cli.show_chain(jobs, as_json, _show_submitted)
        job = planned.submit(out=out, preflight=not skip_preflight, preflight_transport=preflight_transport,
                             on_gate=_show_gate, after=after)
    except PreflightRefused as exc:
        if exc.note:
            output.info(f"preflight: {exc.note}")
        _show_preflight(exc.report)
        raise
    return _after_submit(job, follow=follow, wait=wait, as_json=as_json)


def _check_combined(*, follow: bool, as_json: bool, dry_run: bool, wait: bool | None, chain: int | None) -> None:
    from clusterkit.errors import InputError

    for name, given in (("--json", as_json), ("--dry-run", dry_run), ("--no-wait", wait is False)):
        if follow and given:
            raise InputError(f"--follow and {name} cannot be combined")
    if chain is not None and (follow or wait):
        raise InputError("--chain queues its jobs and returns: follow them with `clusterkit status` "
                         "(not with --wait or --follow)")


def _after_submit(job: Any, *, follow: bool, wait: bool | None, as_json: bool) -> int:
    """What submit says once the job is queued, and the following or waiting asked for."""
    from clusterkit.cli import output

    rec = job.record
    if job.unsaved is not None:
        output.warn(f"job {rec.job_id} is submitted, but its record was not saved, so status, logs and cancel "
                    f"do not know it (run directory {rec.run_dir}): {job.unsaved}")
    if job.untagged is not None:
        output.warn(f"job {rec.job_id} is submitted without its run tag ({job.untagged}); "
                    f"status --run finds it by its record")
    if follow:
        _show_submitted(rec, False)
        from clusterkit.cli.jobs import stream_to_end

        return stream_to_end(job)
    if wait is None:
        wait = traits(rec.scheduler).submit_waits
    if not as_json and job.run is not None:
        from clusterkit.cli.render import choices_line

        for w in job.run.plan.warnings:
            if w.startswith("code: "):   # what the snapshot left out, a script it does not hold
                output.warn(w)

        output.info(choices_line(job.run).strip())
        if job.run.plan.cadence is not None and job.run.plan.slurm:
            output.info(job.run.plan.cadence.worded())
    if not wait:
        _show_submitted(rec, as_json)
        return 0
    if not as_json:
        _show_submitted(rec, False)
    from clusterkit.cli.jobs import follow_to_end

    return follow_to_end(job, as_json)


def _use_upload(tree: str, job_setup: dict[str, Any]) -> None:
    """On the login node: the code a laptop uploaded as ``--code``, from its working directory."""
    import os

    from clusterkit.api.login import checkout
    from clusterkit.errors import InputError

    if job_setup.get("code") or job_setup.get("snapshot") is False:
        raise InputError("--code-upload names the code: not with --code or --no-snapshot")
    path, workdir = checkout(tree)
    os.chdir(path / workdir if workdir else path)
    job_setup["code"] = str(path)


def _exclude_from(ref: str, exclude: str | None) -> str:
    """--exclude with the nodes job ``ref`` dropped added (InputError when it dropped none)."""
    from clusterkit.api import Job
    from clusterkit.cli import output
    from clusterkit.errors import InputError
    from clusterkit.hostlist import HostlistError, expand, fold

    job = Job.find(ref)
    dropped = [v.host for v in job.dropped_nodes()]
    if not dropped:
        raise InputError(f"job {job.key} dropped no nodes (no node choice of its in-job preflight in "
                         f"{job.run_dir}/logs)", field="exclude_from", value=ref)
    try:
        given = expand(exclude) if exclude else []
    except HostlistError as exc:
        raise InputError(str(exc), field="exclude", value=exclude) from None
    output.info(f"clusterkit: keeping out {fold(dropped)}, dropped by job {job.key}")
    return fold([*given, *dropped])


def _note_preflight_skipped(site: Site, skip: bool) -> None:
    from clusterkit.cli import output

    if not skip and traits(site.scheduler.kind).allocates and site.preflight.before_submit:
        output.info("clusterkit: dry run: preflight not run, so nodes it would exclude are not in "
                    "#SBATCH --exclude above")


def _show_gate(gate: Gate) -> None:
    """Preflight's verdict, and the nodes it keeps out of the job, on stderr."""
    from clusterkit.cli import output

    if gate.note:
        output.info(f"preflight: {gate.note}")
    if gate.skipped is not None and gate.note:
        output.info(f"preflight: {gate.skipped}")
    if gate.report is not None:
        _show_preflight(gate.report)
    if gate.excluded:
        from clusterkit.hostlist import fold

        output.warn(f"preflight: keeping {fold(gate.excluded)} out of the job (#SBATCH --exclude)")


def _show_preflight(report: Report) -> None:
    """Preflight's grouped verdict on stderr (stdout stays the submission's own output)."""
    from clusterkit.cli import output

    for g in report.groups():
        output.info(f"preflight: {g.status.value.upper():<11} {g.summary()}")


def _show_dry_run(run: RunDir, as_json: bool, chain_note: str | None = None) -> int:
    from clusterkit.cli import output

    script = run.sbatch
    if as_json:
        from clusterkit.cli.render import job_json

        output.emit_json(job_json(run, dry_run=True))
        return 0
    for w in run.plan.warnings:
        output.warn(w)
    from clusterkit.job.render import override_note

    note = override_note(run.site.config)
    if note:
        output.info(f"clusterkit: dry run: {note}")
    from clusterkit.cli.render import choices_line

    output.info(f"clusterkit: dry run: {choices_line(run).strip()}")
    if run.plan.cadence is not None and run.plan.slurm:
        output.info(f"clusterkit: dry run: {run.plan.cadence.worded()}")
    if run.plan.array is not None:
        from clusterkit.cli.arrays import task_lines

        for line in task_lines(run.plan.array, slurm=traits(run.plan.scheduler).runs_arrays):
            output.info(f"clusterkit: dry run: {line}")
    click.echo(script, nl=False)  # byte for byte what sbatch would get
    if chain_note:
        output.info(f"clusterkit: dry run: {chain_note}")
    written = (f"run directory {run.path}" if run.path.is_dir()
               else "nothing written (--out DIR writes the run directory)")
    output.info(f"clusterkit: dry run: nothing submitted; {written}")
    return 0


def _show_submitted(rec: JobRecord, as_json: bool) -> None:
    from clusterkit.cli import output

    if as_json:
        from clusterkit.scheduler.status import code_of

        output.emit_json({"job": rec.key, "job_id": rec.job_id, "site": rec.site, "stage": rec.stage,
                          "launcher": rec.launcher, "nodes": rec.nnodes, "world_size": rec.world_size,
                          "run_dir": rec.run_dir, "script": rec.script, "state": "SUBMITTED", "code": code_of(rec)})
        return
    where = traits(rec.scheduler).label
    output.line(f"Submitted job {rec.job_id} to {where}: {rec.launcher} on {rec.nnodes} node(s), "
                       f"world size {rec.world_size} (site {rec.site}, stage {rec.stage})")
    output.line(f"  run directory: {rec.run_dir}")
    from clusterkit.job.code import CodeSnapshot
    from clusterkit.tooltext import printable

    code = CodeSnapshot.from_dict(rec.plan.get("code"))
    if code is not None:
        output.line(f"  {printable(code.worded())}")
    arr = rec.plan.get("array")
    if isinstance(arr, dict):   # a job array: its tasks are named JOB_INDEX
        from clusterkit.cli.arrays import values_lines

        if traits(rec.scheduler).runs_arrays:
            output.line(f"  array: {len(arr['indices'])} task(s) (#SBATCH --array={arr['spec']}); "
                        f"one task: clusterkit status {rec.job_id}_<index>")
        else:
            output.line(f"  {'sweep' if arr['sweep_keys'] else 'array'}: {len(arr['indices'])} task(s), one after "
                        "another in this job; its log has each task's lines")
        for line in values_lines(arr["indices"], arr["sweep_keys"], arr["sweep_values"]):
            output.line(f"  {line}")
    ref = rec.job_id if re.fullmatch(r"\d+", rec.job_id) else rec.key
    output.line(f"  its state: clusterkit status {ref}")
    output.line(f"  its logs:  clusterkit logs {ref} --follow")
