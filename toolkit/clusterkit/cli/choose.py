"""``clusterkit choose-nodes``: the job script's choice of nodes from its in-job preflight report.

Run by the supervisor's start inside the job (clusterkit.supervise.start), not by hand: it reads
``logs/preflight-<job>.r<restart>.json`` in the run directory, decides (see
:mod:`clusterkit.preflight.choose`), writes ``logs/nodes-<job>.r<restart>.json`` and prints what
the job script needs, one item a line, so the shell parses nothing.
"""

from __future__ import annotations

import click

EXIT_HELP = """\b
Exit codes:
  0  launch: stdout has the chosen hosts, one a line, in allocation order
  1  end: too few good nodes; stdout has the job's result line
  2  usage error, or the report is missing or not a preflight report
  4  requeue: no spares and a bad node; stdout has the ExcNodeList to set,
     then the reason, one line each
"""


@click.command(epilog=EXIT_HELP)
@click.option("--run-dir", required=True, metavar="DIR", help="The job's run directory (CK_RUN_DIR).")
@click.option("--job", "job_id", required=True, metavar="ID", help="The Slurm job id (SLURM_JOB_ID).")
@click.option("--restart", type=click.IntRange(min=0), default=0, show_default=True,
              help="The restart count (SLURM_RESTART_COUNT).")
@click.option("--allocation", required=True, metavar="NODESET",
              help="The allocated nodes (SLURM_JOB_NODELIST), in Slurm hostlist syntax.")
@click.option("--nodes", "wanted", type=click.IntRange(min=1), required=True, help="Nodes to launch on.")
@click.option("--spares", type=click.IntRange(min=0), default=0, show_default=True, help="Spare nodes allocated.")
@click.option("--check", type=click.Choice(["base", "perf"]), default="base", show_default=True,
              help="Which preflight wrote the report (perf: preflight --perf).")
@click.option("--restarts-left", type=click.IntRange(min=0), default=0, show_default=True,
              help="Requeues the job may still make (0: never requeue, end instead).")
@click.option("--exclude", default="", metavar="NODESET", help="Nodes the job already keeps out (#SBATCH --exclude).")
@click.option("--site-nodes", type=click.IntRange(min=1), default=None,
              help="Nodes the site has: no requeue that would leave fewer than --nodes of them.")
@click.option("--resubmit", default="", metavar="COMMAND",
              help="The command that resubmits the job, for the result line (@JOB@: the job id).")
def choose_nodes(run_dir: str, job_id: str, restart: int, allocation: str, wanted: int, spares: int, check: str,
                 restarts_left: int, exclude: str, site_nodes: int | None, resubmit: str) -> int:
    """Choose the nodes a job launches on from its own preflight report (run by the job script).

    Drops every allocated node whose verdict is not ok (failed, unreachable, slow, wrong-result,
    or no result), keeps the best --nodes of the rest (by the perf figures when every good node
    has them, else in allocation order), and writes the decision to logs/nodes-<job>.r<restart>.json
    for `clusterkit status`, `doctor` and `submit --exclude-from`.
    """
    from pathlib import Path

    from clusterkit.errors import InputError
    from clusterkit.hostlist import HostlistError, expand
    from clusterkit.preflight import choose as ch
    from clusterkit.tooltext import printable

    ch.check_job_id(job_id)
    try:
        alloc = expand(allocation)
        keep_out = expand(exclude) if exclude else []
    except HostlistError as exc:
        raise InputError(str(exc), field="allocation") from None
    base = Path(run_dir)
    verdicts = ch.read_report(ch.report_path(base, job_id, restart))
    # the nodes earlier restarts dropped (each within an allocation of this one's size), not their
    # exclusion lists: a selection file is data others may have written
    earlier = [v.host for s in ch.selections(base, job_id, len(alloc)) if s.restart < restart for v in s.dropped]
    sel = ch.choose(verdicts, alloc, wanted=wanted, spares=spares, job_id=job_id, restart=restart, check=check,
                    restarts_left=restarts_left, exclude=[*keep_out, *earlier],
                    resubmit=printable(resubmit).replace("@JOB@", job_id), site_nodes=site_nodes)
    chosen = ch.selection_path(base, job_id, restart)
    try:
        ch.write_selection(sel, chosen)
    except OSError as exc:
        raise InputError(f"cannot write the node selection into {chosen.parent}: {exc.strerror or exc}") from None
    click.echo(f"clusterkit: {sel.reason}", err=True)
    if sel.outcome == "launch":
        click.echo("\n".join(sel.chosen))
        return 0
    if sel.outcome == "requeue":
        from clusterkit.hostlist import fold

        click.echo(fold(sel.exclude))
        click.echo(sel.reason)
        return 4
    click.echo(sel.reason)
    return 1
