"""Run preflight: choose the checks for a site and stage, fan the one script out through a
Runner, judge every node's output, and return a :class:`~clusterkit.preflight.report.Report`.

This is the function ``clusterkit preflight`` and ``clusterkit submit`` both call::

    report = run_preflight(site, stage="multi-node", nodes="gpu[001-016]", transport="ssh")
    decision = decide_for_site(report, site, nodes_needed=plan.nnodes)
    if decision.refuse: raise PreflightError(decision.reason)
    exclude = decision.exclude                  # -> sbatch --exclude

Node-level trouble never raises; bad input (unknown stage or transport, a bad hostlist) raises
:class:`~clusterkit.errors.UsageError` before any node is contacted.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from clusterkit import hostlist
from clusterkit.errors import InputError
from clusterkit.nodes.runners import make_runner
from clusterkit.preflight import catalogue, engine
from clusterkit.preflight.report import NodeResult, PolicyDecision, Report, decide
from clusterkit.vocab import STAGE_NAMES, TRANSPORTS, stage_for_nodes

if TYPE_CHECKING:
    from clusterkit.config.schema import Site
    from clusterkit.nodes.transport import NodeOutput, Runner
    from clusterkit.preflight.capacity import CheckpointNeed

ProgressCallback = Callable[[NodeResult], None]


def resolve_hosts(site: Site, nodes: str | None, transport: str) -> list[str]:
    """The hosts to check: ``nodes`` (a Slurm hostlist) or the site's nodelist.

    The local transport checks this machine only, under its own name unless one is given.
    """
    if transport == "local":
        if nodes is None:
            return [platform.node() or "localhost"]
        hosts = _expand(nodes)
        if len(hosts) != 1:
            raise InputError(f"names {len(hosts)} hosts; transport local checks this machine only", field="nodes",
                             value=repr(nodes), sep=" ")
        return hosts
    return _expand(nodes if nodes is not None else site.nodes.nodelist)


def _expand(expr: str) -> list[str]:
    try:
        return hostlist.expand(expr)
    except hostlist.HostlistError as exc:
        raise InputError(str(exc), field="nodes") from None


def _node_result(check_set: engine.CheckSet, res: NodeOutput) -> NodeResult | None:
    """A runner result -> a report entry; None for a node the run never finished (Ctrl-C)."""
    from clusterkit.nodes.transport import ErrorKind

    kind = res.error
    if kind is ErrorKind.INTERRUPTED:
        return None
    if kind is not None and not res.reachable:  # (a node is unreachable only with an error kind)
        return NodeResult(res.host, False, error=res.reason or kind.value, error_kind=kind.value,
                          duration_s=res.duration_s)
    cut = res.reason if kind is ErrorKind.COMMAND_TIMEOUT else "the remote command ended early"
    results = tuple(engine.evaluate(check_set, res.stdout, cut))
    error = None
    if kind is ErrorKind.COMMAND_TIMEOUT:
        error = f"remote command timed out: {res.reason}"
    elif res.exit_status != 0 and f"@@ck-{check_set.token}@@" not in res.stdout:
        # the script never got going (no bash, a broken login shell, ...): say what it printed
        said = (res.stderr or res.stdout).strip().splitlines()
        error = f"remote command exited {res.exit_status}" + (f": {said[-1][:200]}" if said else "")
    return NodeResult(res.host, True, results, error=error, error_kind=kind.value if kind else None,
                      duration_s=res.duration_s)


def run_preflight(site: Site, stage: str | None = None, nodes: str | None = None, transport: str = "ssh", *,
                  accept_new_host_keys: bool = False, runner: Runner | None = None,
                  on_result: ProgressCallback | None = None,
                  on_start: Callable[[list[str]], None] | None = None, srun_args: Sequence[str] = (),
                  skip: Mapping[str, str] | None = None, checkpoint: CheckpointNeed | None = None) -> Report:
    """Check ``nodes`` (default: the site's nodelist) for ``stage`` over ``transport``.

    ``stage`` defaults to the stage of a job on that many nodes.  ``runner`` replaces the
    transport's runner (tests, or a caller holding one).  ``on_start(hosts)`` is called once
    before any node is contacted, ``on_result(node_result)`` as each node finishes (from the
    calling thread).  Ctrl-C during the run returns the report so far with ``interrupted``.
    ``srun_args`` go on the srun transport's step, after its own.  ``skip``: hosts not to contact,
    with why (Slurm has them drained or down): each is unreachable with that reason, the rest checked.
    ``checkpoint``: the checkpoints to keep, checked against their directory's room on each node
    (:mod:`~clusterkit.preflight.capacity`; its ``gpus`` 0: the GPUs of the nodes checked).
    """
    if transport not in TRANSPORTS:
        raise InputError(f"choose one of {', '.join(TRANSPORTS)}", field="transport", value=repr(transport))
    if stage is not None and stage not in STAGE_NAMES:
        raise InputError(f"choose one of {', '.join(STAGE_NAMES)}", field="stage", value=repr(stage))
    hosts = resolve_hosts(site, nodes, transport)
    stage = stage or stage_for_nodes(len(hosts))
    if checkpoint is not None and checkpoint.gpus < 1:
        checkpoint = replace(checkpoint, gpus=max(1, len(hosts) * site.nodes.gpus_per_node))
    check_set = catalogue.select_checks(catalogue.Expectations.from_site(site, stage, checkpoint))
    runner = runner if runner is not None else make_runner(site, transport, accept_new_host_keys=accept_new_host_keys,
                                                           srun_args=srun_args)
    report = Report(site.name, stage, transport, hosts, notes=list(check_set.notes),
                    checks=engine.describe_checks(check_set))
    if on_start is not None:
        on_start(hosts)

    def collect(res: NodeOutput) -> None:
        entry = _node_result(check_set, res)
        if entry is not None:
            report.add(entry)
            if on_result is not None:
                on_result(entry)

    from clusterkit.nodes.transport import ErrorKind, NodeOutput, RunResults

    skip = {h: why for h, why in (skip or {}).items() if h in hosts}
    for host, why in skip.items():
        collect(NodeOutput(host, error=ErrorKind.UNAVAILABLE, reason=why))
    t0 = time.monotonic()
    rest = [h for h in hosts if h not in skip]
    results = (runner.run_many(rest, check_set.script(), timeout_s=float(site.ssh.command_timeout_s),
                               fanout=int(site.ssh.fanout), on_result=collect) if rest else RunResults())
    report.interrupted = bool(getattr(results, "interrupted", False))
    report.elapsed_s = time.monotonic() - t0
    _complete(report, results, collect)
    return report


def _complete(report: Report, results: dict[str, NodeOutput], collect: Callable[[NodeOutput], None]) -> None:
    """Every host has a result unless Ctrl-C cut the run: a runner that returned a result
    without reporting it, or none at all, still gets the node into the report as failed."""
    from clusterkit.nodes.transport import ErrorKind, NodeOutput

    reported = {n.host for n in report.nodes}
    for host in report.hosts:
        if host in reported:
            continue
        res = results.get(host)
        if res is None and not report.interrupted:
            res = NodeOutput(host, error=ErrorKind.LAUNCH, reason="the transport gave no result for this node")
        if res is not None:
            collect(res)


def decide_for_site(report: Report, site: Site, nodes_needed: int | None = None) -> PolicyDecision:
    """Apply ``site.preflight`` (policy ``exclude`` or ``refuse``, ``max_excluded_fraction``)."""
    pf = site.preflight
    return decide(report, pf.policy, float(pf.max_excluded_fraction), nodes_needed)
