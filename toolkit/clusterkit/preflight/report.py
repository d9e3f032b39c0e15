"""Preflight results: per node, grouped by identical outcome, as data and JSON; exit codes.

Nothing here prints: the CLI (through rich or plain text) and ``--json`` are two renderings of
the same :class:`Report`.

Exit codes (:meth:`Report.exit_code`): 0 when every node passed (warnings do not fail), 3 when
any node could not be reached or has no result (the report is incomplete, so this wins), else
1 when any node failed a check, or when the check failed on every node alike
(:mod:`~clusterkit.preflight.alike`: then no node is bad, each is ``unjudged``).  2 (usage) never
comes from a report: bad input is refused before any node is contacted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from clusterkit.errors import ExitCode
from clusterkit.hostlist import fold
from clusterkit.preflight import alike
from clusterkit.preflight.engine import CheckResult, Status
from clusterkit.tooltext import printable

REPORT_VERSION = 1


class NodeStatus(str, Enum):
    OK = "ok"
    WARN = "warn"  # passed, with warnings
    FAILED = "failed"
    UNREACHABLE = "unreachable"
    UNJUDGED = "unjudged"  # the check failed on every node alike: its fault, not the nodes' (report-wide)


@dataclass(frozen=True)
class NodeResult:
    """One node's outcome: its check results, or why it could not be checked."""

    host: str
    reachable: bool
    checks: tuple[CheckResult, ...] = ()
    error: str | None = None  # transport-level reason: refused, host key, timeout, ...
    error_kind: str | None = None
    duration_s: float | None = None

    @property
    def status(self) -> NodeStatus:
        if not self.reachable:
            return NodeStatus.UNREACHABLE
        if self.error is not None or any(c.status is Status.FAIL for c in self.checks):
            return NodeStatus.FAILED
        if any(c.status is Status.WARN for c in self.checks):
            return NodeStatus.WARN
        return NodeStatus.OK

    def problems(self) -> list[str]:
        """One line per failure (transport error first), in check order."""
        lines = [printable(self.error)] if self.error else []
        # checks cut off by a failed remote command only repeat its error line
        return lines + [_line(c) for c in self.checks if c.status is Status.FAIL and not (self.error and c.cut)]

    def warnings(self) -> list[str]:
        return [_line(c) for c in self.checks if c.status is Status.WARN]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"host": self.host, "status": self.status.value, "reachable": self.reachable}
        if self.error is not None:
            out["error"] = self.error
            out["error_kind"] = self.error_kind
        if self.duration_s is not None:
            out["duration_s"] = round(self.duration_s, 3)
        out["checks"] = [c.to_dict() for c in self.checks]
        return out


def _line(c: CheckResult) -> str:
    return printable(f"{c.check}: {c.message}")


@dataclass(frozen=True)
class Group:
    """Nodes with the same outcome: ``62 nodes: ok`` or ``node017: ib.ports: mlx5_3 port 1 DOWN``."""

    status: NodeStatus
    hosts: tuple[str, ...]
    lines: tuple[str, ...]  # the problems (or warnings) they share; empty when plainly ok

    @property
    def nodeset(self) -> str:
        return fold(self.hosts)

    def summary(self) -> str:
        """The group as one line of text."""
        who = self.nodeset if len(self.hosts) <= 1 else f"{len(self.hosts)} nodes ({self.nodeset})"
        what = "; ".join(self.lines) if self.lines else self.status.value
        if self.status is NodeStatus.OK and not self.lines and len(self.hosts) > 1:
            who = f"{len(self.hosts)} nodes"
        return f"{who}: {what}"

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "count": len(self.hosts), "nodes": self.nodeset, "lines": list(self.lines)}


_ORDER = {NodeStatus.UNJUDGED: 0, NodeStatus.UNREACHABLE: 0, NodeStatus.FAILED: 1, NodeStatus.WARN: 2, NodeStatus.OK: 3}


@dataclass
class Report:
    """The outcome of one preflight run (possibly interrupted: see ``unchecked``)."""

    site: str
    stage: str
    transport: str
    hosts: Sequence[str]  # every node that was to be checked, in order
    nodes: list[NodeResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checks: list[dict[str, str]] = field(default_factory=list)  # what was checked (describe_checks)
    interrupted: bool = False
    elapsed_s: float = 0.0

    def add(self, result: NodeResult) -> None:
        self.nodes.append(result)

    @property
    def common_fault(self) -> str | None:
        """The cause when the check failed on every node alike (:func:`alike.common_fault`), else None:
        then no node is bad and each is ``unjudged``."""
        if self.interrupted or self.unchecked():
            return None
        # srun refusing the step as a whole (an error naming no node): the check's fault on one node too.
        # Nodes unreachable otherwise (SSH refused, no such name) stay unreachable: nothing was checked.
        refused = bool(self.nodes) and all(n.error_kind == "launch" and "error" in (n.error or "").lower()
                                           and not any(h in (n.error or "") for h in self.hosts) for n in self.nodes)
        return alike.common_fault(((n.host, refused or n.status is NodeStatus.FAILED, n.problems())
                                   for n in self.nodes), min_nodes=1 if refused else alike.MIN_NODES)

    def _status(self, n: NodeResult, fault: str | None) -> NodeStatus:
        return NodeStatus.UNJUDGED if fault is not None else n.status

    def _with(self, *statuses: NodeStatus) -> list[str]:
        fault = self.common_fault
        return [n.host for n in self.nodes if self._status(n, fault) in statuses]

    def failed_nodes(self) -> list[str]:
        """Nodes reached that failed a check (error severity) or whose command failed."""
        return self._with(NodeStatus.FAILED)

    def unreachable_nodes(self) -> list[str]:
        return self._with(NodeStatus.UNREACHABLE)

    def bad_nodes(self) -> list[str]:
        """Every node a job must not use: failed or unreachable."""
        return self._with(NodeStatus.FAILED, NodeStatus.UNREACHABLE)

    def ok_nodes(self) -> list[str]:
        """Nodes that passed (warnings allowed)."""
        return self._with(NodeStatus.OK, NodeStatus.WARN)

    def unchecked(self) -> list[str]:
        """Nodes with no result (the run was interrupted before they answered)."""
        done = {n.host for n in self.nodes}
        return [h for h in self.hosts if h not in done]

    def groups(self) -> list[Group]:
        """Nodes grouped by identical outcome, worst first, then by size."""
        fault = self.common_fault
        if fault is not None:
            said = alike.worded(fault, len(self.nodes))
            return [Group(NodeStatus.UNJUDGED, tuple(n.host for n in self.nodes), (said,))]
        buckets: dict[tuple[NodeStatus, tuple[str, ...]], list[str]] = {}
        for n in self.nodes:
            lines = n.problems() if n.status in (NodeStatus.FAILED, NodeStatus.UNREACHABLE) else n.warnings()
            buckets.setdefault((n.status, tuple(lines)), []).append(n.host)
        groups = [Group(status, tuple(hosts), lines) for (status, lines), hosts in buckets.items()]
        return sorted(groups, key=lambda g: (_ORDER[g.status], -len(g.hosts), g.nodeset))

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in NodeStatus}
        fault = self.common_fault
        for n in self.nodes:
            out[self._status(n, fault).value] += 1
        if not out[NodeStatus.UNJUDGED.value]:   # there only when the check failed on every node alike
            del out[NodeStatus.UNJUDGED.value]
        out["unchecked"] = len(self.unchecked())
        return out

    def exit_code(self) -> ExitCode:
        """3 if any node was unreachable or has no result, else 1 if any failed, else 0
        (warnings pass): a node nobody heard from never counts as passed."""
        if self.unreachable_nodes() or self.unchecked():
            return ExitCode.UNREACHABLE
        if self.failed_nodes() or self.common_fault is not None:
            return ExitCode.FAILURE
        return ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``clusterkit preflight --json``); ``version`` changes with its shape."""
        fault = self.common_fault
        return {
            "version": REPORT_VERSION,
            "site": self.site,
            "stage": self.stage,
            "transport": self.transport,
            "exit_code": int(self.exit_code()),
            "interrupted": self.interrupted,
            "elapsed_s": round(self.elapsed_s, 3),
            "counts": self.counts(),
            "failed": fold(self.failed_nodes()),
            "unreachable": fold(self.unreachable_nodes()),
            "unchecked": fold(self.unchecked()),
            "common_fault": fault,
            "notes": list(self.notes),
            "groups": [g.to_dict() for g in self.groups()],
            "checks": list(self.checks),
            "nodes": [{**n.to_dict(), "status": self._status(n, fault).value} for n in self._in_host_order()],
        }

    def _in_host_order(self) -> list[NodeResult]:
        """Results in the order the hosts were given (they arrive in completion order)."""
        pos = {h: i for i, h in enumerate(self.hosts)}
        return sorted(self.nodes, key=lambda n: pos.get(n.host, len(pos)))


# ---------------------------------------------------------------------------------------------
# site policy: what submit does with a report
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyDecision:
    """What submission should do: go ahead excluding ``exclude``, or refuse with ``reason``."""

    refuse: bool
    exclude: tuple[str, ...]
    reason: str


def decide(report: Report, policy: str, max_excluded_fraction: float = 1.0,
           nodes_needed: int | None = None) -> PolicyDecision:
    """Apply the site's ``preflight.policy`` to a report.

    ``exclude``: leave failed and unreachable nodes out, unless more than
    ``max_excluded_fraction`` of the checked nodes are bad (something site-wide is wrong) or
    fewer than ``nodes_needed`` good nodes remain.  ``refuse``: any bad node refuses.
    """
    fault = report.common_fault
    if fault is not None:   # not the nodes': none is kept out, the job is not refused for it
        return PolicyDecision(False, (), f"preflight: {alike.worded(fault, len(report.nodes))}")
    bad = tuple(report.bad_nodes())
    if report.interrupted:
        return PolicyDecision(True, bad, "preflight was interrupted before every node was checked")
    unchecked = report.unchecked()
    if unchecked:  # never "all passed" with a node nobody heard from
        return PolicyDecision(True, bad + tuple(unchecked), f"preflight has no result from {fold(unchecked)}")
    if not bad:
        return PolicyDecision(False, (), "all nodes passed preflight")
    listed = fold(bad)
    if policy == "refuse":
        return PolicyDecision(True, bad, f"preflight failed on {listed} and the site's preflight.policy is refuse")
    total = len(report.nodes) or 1
    if len(bad) / total > max_excluded_fraction:
        return PolicyDecision(True, bad, f"{len(bad)} of {total} nodes failed preflight ({listed}), more than "
                                         f"preflight.max_excluded_fraction={max_excluded_fraction:g}")
    good = len(report.ok_nodes())
    if nodes_needed is not None and good < nodes_needed:
        return PolicyDecision(True, bad, f"only {good} nodes passed preflight, the job needs {nodes_needed} "
                                         f"(failed: {listed})")
    return PolicyDecision(False, bad, f"excluding {listed} (failed preflight)")
