"""``clusterkit nodes``: the nodes that failed on a site, how often, how, and in which jobs."""

from __future__ import annotations

import click

from clusterkit.cli.common import site_option


@click.command()
@site_option
@click.option("--json", "as_json", is_flag=True, help="Print the history as JSON.")
@click.option("--html", "html_file", metavar="FILE", default=None,
              help="Also write the history as one self-contained HTML page, each node's timeline in it.")
def nodes(site: str, as_json: bool, html_file: str | None) -> int:
    """Show the nodes that failed in your jobs on SITE: times failed, the last failure, the checks
    or verdicts, and the jobs.

    The history is yours (in clusterkit's state directory, one file per site).  It holds the
    nodes a before-submit preflight kept out of a job, the nodes a job's in-job preflight
    dropped, the nodes a job's recovery inside its allocation dropped from a failed attempt,
    and the nodes `clusterkit doctor` blamed for a job's failure.  A node with at
    least node_history.exclude_after hardware failures within node_history.window_days is kept
    out of new jobs (#SBATCH --exclude); node_history.allow in the site file, or
    --set node_history=false on one job, lets it in.  For those nodes the command an admin
    would run to drain them is printed, never run.
    """
    from clusterkit.api import Site, node_history
    from clusterkit.cli import output

    found = node_history(Site.load(site))
    for w in found.warnings:
        output.warn(w)
    if html_file is not None:
        write_html(html_file, found.html())
    if as_json:
        output.emit_json(found.to_dict())
        return 0
    if not found.nodes:
        output.line(f"No failures recorded on site {found.site} (history: {found.path}).")
        return 0
    days = f"{found.keys.window_days:g}"
    rows = [(n.node, n.failures, n.recent_hardware, n.last_at[:19].replace("T", " "),
             ", ".join(f"{w} x{c}" if c > 1 else w for w, c in n.verdicts),
             ", ".join(n.jobs) + (f" (+{n.job_count - len(n.jobs)})" if n.job_count > len(n.jobs) else ""),
             "kept out" if n.kept_out else "allowed" if n.allowed else "")
            for n in found.nodes]
    output.print_table(f"Nodes that failed on {found.site}",
                       ("NODE", "FAILED", f"HW IN {days}D", "LAST SEEN (UTC)", "VERDICTS", "JOBS", "NEW JOBS"), rows,
                       keys=("NODE",), right=("FAILED", f"HW IN {days}D"), drop=("JOBS", "VERDICTS"))
    rule = (f"kept out of new jobs: {found.keys.exclude_after} or more hardware failures in {days} day(s)"
            if found.keys.exclude_after else "node_history.exclude_after is 0: no node is kept out")
    output.line(f"{rule} (history: {found.path})")
    if found.kept_out:
        output.line("an admin would drain them with (clusterkit does not run this):")
        for cmd in found.drain_commands():
            output.line(f"  {cmd}")
    return 0


def write_html(path: str, text: str) -> None:
    """The page at ``path``, whole or not at all; a path that cannot take it is a usage error."""
    from pathlib import Path

    from clusterkit.cli import output
    from clusterkit.errors import InputError
    from clusterkit.safefile import write_atomic

    target = Path(path).expanduser().absolute()
    try:
        write_atomic(target, text.encode())
    except OSError as exc:
        raise InputError(f"cannot write {target} ({exc.strerror or exc})", field="html", value=path) from None
    output.info(f"wrote {target}")
