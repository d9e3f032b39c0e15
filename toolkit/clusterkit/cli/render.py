"""``clusterkit render``: write the job script, hostfiles and configs into a run directory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from clusterkit.cli.common import build_request, job_options
from clusterkit.scheduler import traits

if TYPE_CHECKING:
    from clusterkit.api import RunDir
    from clusterkit.job.choices import Choice


def rendered_summary(run: RunDir) -> dict[str, Any]:
    p = run.plan
    return {"run_dir": str(run.path), "script": str(run.script), "files": sorted(run.files),
            "site": p.site, "stage": p.stage, "launcher": p.launcher, "nodes": p.nnodes,
            "gpus_per_node": p.gpus_per_node, "world_size": p.world_size, "job_name": p.job_name,
            "warnings": list(p.warnings), "cadence": p.cadence.to_dict() if p.cadence else None}


def job_json(run: RunDir, *, dry_run: bool) -> dict[str, Any]:
    """What ``render --json`` and ``submit --dry-run --json`` print: the same keys, the job
    script's text among them; ``dry_run`` says which command wrote it."""
    from clusterkit.cli.arrays import tasks_json

    return {**rendered_summary(run), "scheduler": run.plan.scheduler, "job_sbatch": run.sbatch, "dry_run": dry_run,
            "choices": {c.name: {"value": c.value, "from": c.source} for c in choices(run)},
            **tasks_json(run.plan.array)}


def choices(run: RunDir) -> list[Choice]:
    from clusterkit.job.choices import choices as plan_choices

    return plan_choices(run.plan)


def choices_line(run: RunDir) -> str:
    """The choices made for the job, each with where it came from (flag, stage, site, default),
    and the nodes the node history kept out of it."""
    from clusterkit.history.book import kept_out_note

    kept = kept_out_note(run.plan.warnings)
    return "  choices: " + ", ".join(c.worded() for c in choices(run)) + (
        f", kept out: {kept} (node history)" if kept else "")


def show_rendered(run: RunDir, as_json: bool) -> None:
    from clusterkit.cli import output

    if as_json:
        output.emit_json(job_json(run, dry_run=False))
        return
    for w in run.plan.warnings:
        output.warn(w)
    p = run.plan
    output.line(f"Rendered {p.job_name}: {p.launcher} on {p.nnodes} node(s) x {p.gpus_per_node} GPU(s) "
                       f"(site {p.site}, stage {p.stage})")
    output.line(choices_line(run))
    if p.cadence is not None and p.slurm:   # on this machine alone it says nothing useful
        output.line(f"  {p.cadence.worded()}")
    written = run.path.is_dir()
    output.line(f"  run directory: {run.path}" if written
                else "  run directory: none written (preview); --out DIR writes these files")
    output.line(f"  files: {', '.join(sorted(run.files))}")
    if p.array is not None:
        from clusterkit.cli.arrays import task_lines

        for line in task_lines(p.array, slurm=traits(p.scheduler).runs_arrays):
            output.line(f"  {line}")


@click.command()
@job_options
def render(site: str, stage: str | None, launcher: str | None, nodes: int | None, gpus_per_node: int | None,
           sets: tuple[str, ...], out: str | None, job_name: str | None, exclude: str | None, debug: bool,
           as_json: bool, command: tuple[str, ...], **job_setup: Any) -> None:
    """Render everything a job needs, without submitting; --out DIR writes it to a run directory.

    \b
    Example:
      clusterkit render --site ib-h100 --nodes 4 --out runs/try -- python train.py

    Without --out nothing is written: the summary shows what would be.  The run
    directory holds job.sbatch (exactly what `submit` hands to sbatch), nccl.env, plan.json,
    and the launcher's files (hostfile, ds_config.json, accelerate.yaml).
    """
    from clusterkit.api import Plan, Site

    request = build_request(stage=stage, command=command, launcher=launcher, nodes=nodes,
                            gpus_per_node=gpus_per_node, sets=sets, job_name=job_name,
                            exclude=exclude, debug=debug, job=job_setup)
    show_rendered(Plan(Site.load(site), request).render(out, write=out is not None), as_json)
