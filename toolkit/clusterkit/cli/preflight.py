"""``clusterkit preflight``: check GPUs, drivers, IB links and storage on the nodes.

Parses options, calls :func:`clusterkit.preflight.run.run_preflight`, renders the report
(a rich table on a terminal, plain lines in a pipe, one JSON document with ``--json``) and
returns the report's exit code.  Ctrl-C stops the run and prints what was checked so far.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING

import click

from clusterkit.cli.common import nodelist_option, site_option_named
from clusterkit.errors import ClusterkitError

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from clusterkit.preflight.report import Group, NodeResult, Report

EXIT_HELP = """\b
Exit codes:
  0  every node passed (warnings do not fail)
  1  some nodes failed a check
  2  usage or config error (nothing was checked)
  3  some nodes could not be reached (wins over 1: the report is incomplete)
  130 interrupted (Ctrl-C); what was checked so far is printed
"""

_STYLE = {"unreachable": "bold magenta", "failed": "bold red", "warn": "yellow", "ok": "green"}


@click.command(epilog=EXIT_HELP)
@site_option_named("site_ref", required=False)
@click.option("--stage", metavar="STAGE", help="single-node, multi-node or large-cluster "
              "(default: from the number of nodes).")
@click.option("--nodelist", "nodes", metavar="NODESET",
              help="Nodes to check, Slurm hostlist syntax (default: the site's nodelist).")
@click.option("--nodes", "old_nodes", metavar="NODESET", hidden=True,
              help="Deprecated spelling of --nodelist (--nodes is a number of nodes elsewhere).")
@click.option("--transport", metavar="ssh|srun|local", help="How to reach the nodes "
              "(default: ssh; local for a site whose scheduler is local).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON document.")
@click.option("--accept-new-host-keys", is_flag=True, help="Store host keys not yet in known_hosts "
              "(changed keys are still refused).")
@click.option("--srun-arg", "srun_args", multiple=True, metavar="ARG",
              help="Argument added to the srun step (--transport srun), repeatable (e.g. --srun-arg=--mpi=pmix).")
def preflight(site_ref: str | None, stage: str | None, nodes: str | None, old_nodes: str | None,
              transport: str | None, as_json: bool, accept_new_host_keys: bool, srun_args: tuple[str, ...]) -> int:
    """Check the nodes a job would run on: GPUs and driver, InfiniBand/RoCE ports,
    GPUDirect RDMA, and the site's storage, in parallel, one connection per node.

    Nodes with identical results are grouped; the report names each bad node and why.
    """
    from clusterkit.api import Site
    from clusterkit.errors import InputError
    from clusterkit.vocab import TRANSPORTS

    if not site_ref:
        raise InputError("preflight needs --site SITE or $CLUSTERKIT_SITE (a site config path or name; "
                         "see `clusterkit sites list`)")
    if transport is not None and transport not in TRANSPORTS:  # before the site is read
        raise InputError(f"choose one of {', '.join(TRANSPORTS)}", field="transport", value=repr(transport))
    nodes = nodelist_option(nodes, old_nodes)
    site = Site.load(site_ref)
    progress = _Progress(enabled=sys.stderr.isatty())
    try:
        report = site.preflight(nodes, stage=stage, transport=transport, accept_new_host_keys=accept_new_host_keys,
                                on_start=progress.start, on_result=progress.advance, srun_args=srun_args)
    except ClusterkitError as err:  # the API's field "nodes" is this command's --nodelist
        err.problems = tuple(replace(p, field="nodelist") if p.field == "nodes" else p for p in err.problems)
        raise
    finally:
        progress.stop()
    if as_json:
        from clusterkit.cli import output

        output.emit_json(report.to_dict())
    else:
        _render(report)
    return 130 if report.interrupted else int(report.exit_code())


class _Progress:
    """A rich progress bar on stderr while nodes answer; nothing at all when not a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def start(self, hosts: list[str]) -> None:
        if not self.enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from clusterkit.cli import output

        self._bar = Progress(TextColumn("preflight"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[bad]}"), TimeElapsedColumn(),
                             console=output.err(), transient=True)
        self._task = self._bar.add_task("preflight", total=len(hosts), bad="")
        self._bad = 0
        self._bar.start()

    def advance(self, node: NodeResult) -> None:
        if self._bar is None or self._task is None:
            return
        if node.status.value in ("failed", "unreachable"):
            self._bad += 1
        self._bar.update(self._task, advance=1, bad=f"{self._bad} bad" if self._bad else "")

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _headline(report: Report) -> str:
    c = report.counts()
    parts = [f"{c[k]} {k}" for k in ("ok", "warn", "failed", "unreachable", "unchecked") if c[k]]
    checked = len(report.nodes)
    return (f"preflight {report.site} ({report.stage}, {report.transport}): {checked} of {len(report.hosts)} nodes "
            f"checked in {report.elapsed_s:.1f} s: {', '.join(parts) or 'nothing checked'}")


def _render(report: Report) -> None:
    """Human rendering: a table on a terminal, one line per group in a pipe."""
    from rich.markup import escape

    from clusterkit.cli import output

    console = output.out()
    groups = report.groups()
    if console.is_terminal:
        table = output.table(None, ["status", "nodes", "result"], [], keys=("status", "nodes"))
        # the key columns (status, nodes) whole at any width; the result lines fold
        table.columns[0].min_width = max([6, *(len(g.status.value) for g in groups)])
        table.columns[1].min_width = max([5, *(len(_who(g)) for g in groups)])
        for g in groups:
            style = _STYLE[g.status.value]
            table.add_row(f"[{style}]{g.status.value}[/{style}]", escape(_who(g)), escape("\n".join(g.lines) or "ok"))
        console.print(table)
    else:
        for g in groups:
            console.print(f"{g.status.value.upper():<11} {g.summary()}", markup=False)
    if report.unchecked():
        console.print(f"{'UNCHECKED':<11} {_fold(report.unchecked())}: interrupted before these answered", markup=False)
    for note in report.notes:
        console.print(f"note: {note}", markup=False, style="dim")
    console.print(_headline(report), markup=False)


def _who(group: Group) -> str:
    return group.nodeset if len(group.hosts) == 1 else f"{len(group.hosts)} nodes: {group.nodeset}"


def _fold(hosts: list[str]) -> str:
    from clusterkit.hostlist import fold

    return fold(hosts)
