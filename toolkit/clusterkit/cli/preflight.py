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

    from clusterkit.config.schema import Site as SiteConfig
    from clusterkit.preflight.perf import NodeVerdict, PerfReport
    from clusterkit.preflight.report import Group, NodeResult, Report

EXIT_HELP = """\b
Exit codes:
  0  every node passed (warnings do not fail)
  1  some nodes failed a check (--perf: a node slow, wrong-result or failed,
     or a slow link), or the check failed on every node alike: a fault of
     the check or its environment, so every node is unjudged, none bad
  2  usage or config error (nothing was checked)
  3  some nodes could not be reached (wins over 1: the report is incomplete)
  130 interrupted (Ctrl-C); what was checked so far is printed
"""

_STYLE = {"unjudged": "bold yellow", "unreachable": "bold magenta", "failed": "bold red", "warn": "yellow",
          "ok": "green"}


@click.command(epilog=EXIT_HELP)
@site_option_named("site_ref", required=False)
@click.option("--stage", metavar="STAGE", help="single-node, multi-node or large-cluster "
              "(default: from the number of nodes).")
@click.option("--nodelist", "nodes", metavar="NODESET",
              help="Nodes to check, Slurm hostlist syntax (default: the site's nodelist).")
@click.option("--nodes", "old_nodes", metavar="NODESET", hidden=True,
              help="Deprecated spelling of --nodelist (--nodes is a number of nodes elsewhere).")
@click.option("--transport", metavar="ssh|srun|local", help="How to reach the nodes "
              "(default: the site's preflight.transport, ssh unless set; local for a local site).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON document.")
@click.option("--accept-new-host-keys", is_flag=True, help="Store host keys not yet in known_hosts "
              "(changed keys are still refused).")
@click.option("--srun-arg", "srun_args", multiple=True, metavar="ARG",
              help="Argument added to the srun step (--transport srun), repeatable (e.g. --srun-arg=--mpi=pmix).")
@click.option("--perf", is_flag=True, help="Measure instead: matmul throughput and checksum per GPU, all-reduce "
              "bandwidth within each node, between node pairs and over all nodes, in one srun step (--transport "
              "srun); name slow nodes, slow links and wrong results (the site's perf: settings).")
@click.option("--model-params", metavar="SIZE", default=None,
              help="Check the checkpoint directory's room for this model's checkpoints (7B, 70e9): "
                   "14 bytes a parameter, one file per GPU, times --keep-checkpoints.")
@click.option("--keep-checkpoints", metavar="N", default=None,
              help="With --model-params: checkpoints kept (default 2).")
@click.option("--checkpoint-dir", metavar="DIR", default=None,
              help="With --model-params: the checkpoint directory on the nodes (default: the site's).")
@click.option("--checkpoint-warn-only", is_flag=True, hidden=True,
              help="Too little room for the checkpoints warns instead of failing the node (the in-job preflight).")
def preflight(site_ref: str | None, stage: str | None, nodes: str | None, old_nodes: str | None,
              transport: str | None, as_json: bool, accept_new_host_keys: bool, srun_args: tuple[str, ...],
              perf: bool, model_params: str | None, keep_checkpoints: str | None, checkpoint_dir: str | None,
              checkpoint_warn_only: bool) -> int:
    """Check the nodes a job would run on: GPUs and driver, InfiniBand/RoCE ports,
    GPUDirect RDMA, and the site's storage, in parallel, one connection per node.

    Nodes with identical results are grouped; the report names each bad node and why.
    With --perf, measure the nodes of an allocation and find the slow one.
    """
    from clusterkit.api import Site
    from clusterkit.errors import InputError
    from clusterkit.vocab import TRANSPORTS

    if not site_ref:
        raise InputError("preflight needs --site SITE or $CLUSTERKIT_SITE (a site config path or name; "
                         "see `clusterkit sites list`)")
    if transport is not None and transport not in TRANSPORTS:  # before the site is read
        raise InputError(f"choose one of {', '.join(TRANSPORTS)}", field="transport", value=repr(transport))
    if perf and transport not in (None, "srun"):
        raise InputError("--perf runs one srun step over the nodes: use --transport srun", field="transport",
                         value=repr(transport))
    nodes = nodelist_option(nodes, old_nodes)
    given = _checkpoint_options(model_params, keep_checkpoints, checkpoint_dir, checkpoint_warn_only, perf)
    site = Site.load(site_ref)
    if perf:
        return _perf(site.config, stage, nodes, srun_args, as_json)
    need = None
    if given is not None:
        need = site.checkpoint_need(given[0], given[1], checkpoint_dir, warn_only=checkpoint_warn_only)
    progress = _Progress(enabled=sys.stderr.isatty())
    try:
        report = site.preflight(nodes, stage=stage, transport=transport, accept_new_host_keys=accept_new_host_keys,
                                on_start=progress.start, on_result=progress.advance, srun_args=srun_args,
                                checkpoint=need)
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


def _checkpoint_options(params: str | None, keep: str | None, where: str | None, warn_only: bool,
                        perf: bool) -> tuple[int, int] | None:
    """(parameters, checkpoints kept) for the checkpoint capacity check, or None without --model-params."""
    from clusterkit.errors import InputError
    from clusterkit.sizing import parse_size

    if params is None:
        stray = [n for n, v in (("--keep-checkpoints", keep), ("--checkpoint-dir", where),
                                ("--checkpoint-warn-only", warn_only)) if v]
        if stray:
            raise InputError(f"{', '.join(stray)} only make sense with --model-params")
        return None
    if perf:
        raise InputError("--model-params checks the checkpoint directory: not with --perf")
    count = 2
    if keep is not None:
        if not keep.strip().isdigit() or not 1 <= int(keep) <= 1000:
            raise InputError(f"--keep-checkpoints {keep[:40]!r}: keep 1 to 1000 checkpoints")
        count = int(keep)
    if where is not None and (not where or any(ord(c) < 32 for c in where)):
        raise InputError(f"--checkpoint-dir {where[:80]!r}: not a directory path")
    return parse_size(params, "--model-params"), count


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
    parts = [f"{c[k]} {k}" for k in ("ok", "warn", "failed", "unreachable", "unjudged", "unchecked") if c.get(k)]
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
    hint = _ssh_hint(report)
    if hint:
        console.print(f"hint: {hint}", markup=False)
    console.print(_headline(report), markup=False)


def _ssh_hint(report: Report) -> str | None:
    """Most nodes unreachable over SSH: the cluster may take no SSH to compute nodes."""
    unreachable = [n for n in report.nodes if n.status.value == "unreachable"]   # unjudged ones too
    if report.transport != "ssh" or len(unreachable) < 2 or 2 * len(unreachable) < len(report.nodes):
        return None
    return (f"{len(unreachable)} of {len(report.nodes)} nodes did not answer over SSH; where compute nodes take "
            "no SSH, check them through Slurm: --transport srun, or preflight.transport: srun in the site file")


def _perf(site: SiteConfig, stage: str | None, nodes: str | None, srun_args: tuple[str, ...], as_json: bool) -> int:
    """``preflight --perf``: one measuring srun step, then the verdicts."""
    from clusterkit.errors import InputError
    from clusterkit.nodes.runners import site_srun_args
    from clusterkit.preflight.perf import run_perf
    from clusterkit.preflight.run import resolve_hosts
    from clusterkit.vocab import STAGE_NAMES, stage_for_nodes

    if stage is not None and stage not in STAGE_NAMES:
        raise InputError(f"choose one of {', '.join(STAGE_NAMES)}", field="stage", value=repr(stage))
    try:
        hosts = resolve_hosts(site, nodes, "srun")
    except ClusterkitError as err:  # the API's field "nodes" is this command's --nodelist
        err.problems = tuple(replace(p, field="nodelist") if p.field == "nodes" else p for p in err.problems)
        raise
    from clusterkit.actions import preflight_skip
    from clusterkit.preflight.perf import Limits, NodeVerdict, judge

    skip = preflight_skip(site, nodes, "srun")   # drained or down in Slurm: a step naming one would wait
    measured = [h for h in hosts if h not in skip]
    try:
        report = run_perf(site, measured, stage=stage or stage_for_nodes(len(hosts)), srun_args=srun_args,
                          extra_srun_args=site_srun_args(site)) if measured else judge([], [], Limits())
    except OSError as exc:  # srun itself could not be started
        raise InputError(f"cannot run srun: {exc.strerror or exc}", field="transport", value="'srun'") from None
    if skip:
        said = {n.host: n for n in report.nodes}
        said.update({h: NodeVerdict(h, "unreachable", [why]) for h, why in skip.items()})
        report.hosts, report.nodes = list(hosts), [said[h] for h in hosts]
        report.site, report.stage = site.name, stage or stage_for_nodes(len(hosts))
    if as_json:
        from clusterkit.cli import output

        output.emit_json(report.to_dict())
    else:
        _render_perf(report)
    return 130 if report.interrupted else int(report.exit_code())


_PERF_STYLE = {"unjudged": "bold yellow", "ok": "green", "slow": "bold yellow", "wrong-result": "bold red",
               "failed": "bold red", "unreachable": "bold magenta"}


def _render_perf(report: PerfReport) -> None:
    """One row per node with its figures; slow links; timings."""
    from rich.markup import escape

    from clusterkit.cli import output

    console = output.out()
    rounds = len(report.pairings)

    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.3g}"

    def inter(n: NodeVerdict) -> list[str]:
        by_round = {int(p["round"]): f"{p['gbps']:.3g} ({p['peer']})" for p in n.busbw_inter_gbps}
        return [by_round.get(r, "-") for r in range(1, rounds + 1)]

    heads = ["node", "verdict", "TFLOP/s", "intra Gbit/s", *[f"round {r} Gbit/s" for r in range(1, rounds + 1)],
             "reason"]
    if console.is_terminal:
        table = output.table(None, heads, [], keys=("node", "verdict"))
        for n in report.nodes:
            style = _PERF_STYLE[n.status]
            table.add_row(escape(n.host), f"[{style}]{n.status}[/{style}]", num(n.gemm_tflops),
                          num(n.busbw_intra_gbps), *[escape(c) for c in inter(n)],
                          escape(n.reason if n.status != "ok" else ""))
        console.print(table)
    else:
        for n in report.nodes:
            figures = (f"gemm {num(n.gemm_tflops)} TFLOP/s, intra {num(n.busbw_intra_gbps)} Gbit/s, "
                       f"pairs {' '.join(inter(n)) or '-'} Gbit/s")
            if n.gemm_tflops is None and not n.busbw_inter_gbps:
                figures = "no figures"
            tail = "" if n.status == "ok" else f": {n.reason}"
            console.print(f"{n.status.upper():<12} {n.host:<10} {figures}{tail}", markup=False)
    for link in report.slow_links:
        console.print(f"SLOW LINK    {link['nodes'][0]} <-> {link['nodes'][1]}: {link['gbps']:.3g} Gbit/s in round "
                      f"{link['round']}, below {link['floor']:.3g}", markup=False)
    for note in report.notes:
        console.print(f"note: {note}", markup=False, style="dim")
    if report.common_fault is not None:
        from clusterkit.preflight.alike import worded

        console.print(f"UNJUDGED     {worded(report.common_fault, len(report.nodes))}", markup=False)
    c = report.counts()
    parts = [f"{c[k]} {k}" for k in ("ok", "slow", "wrong-result", "failed", "unreachable", "unjudged") if c.get(k)]
    links = f", {len(report.slow_links)} slow link(s)" if report.slow_links else ""
    world = "" if report.busbw_world_gbps is None else f"; all nodes {report.busbw_world_gbps:.3g} Gbit/s"
    timing = "" if report.startup_s is None else f" (start-up {report.startup_s:.1f} s"
    timing += "" if report.measure_s is None else f", measurement {report.measure_s:.1f} s)" if timing else ""
    console.print(f"preflight --perf {report.site} ({report.backend or 'no backend'}, {len(report.hosts)} nodes, "
                  f"{rounds} rounds): {', '.join(parts)}{links}{world}; {report.elapsed_s:.1f} s{timing}",
                  markup=False)


def _who(group: Group) -> str:
    return group.nodeset if len(group.hosts) == 1 else f"{len(group.hosts)} nodes: {group.nodeset}"


def _fold(hosts: list[str]) -> str:
    from clusterkit.hostlist import fold

    return fold(hosts)
