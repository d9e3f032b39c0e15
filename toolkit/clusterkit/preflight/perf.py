"""``clusterkit preflight --perf``: measure every node of an allocation and judge it.

:func:`run_perf` starts one srun step (:func:`srun_argv`) running
:mod:`clusterkit.preflight.perf_worker` on every node (one task per GPU with NCCL, one per
node with gloo), collects the figures each task prints (:func:`parse_output`) and judges them
(:func:`judge`), which is pure: the unit tests feed it recorded figures.

Verdicts, per node: ``failed`` (a task raised, or stopped before its last figure), then
``wrong-result`` (its matmul checksum differs from the allocation's majority: the same inputs
must give the same bits), then ``slow``: its matmul throughput, its all-reduce busbw within
the node, or every pair it is in, below the site's ``perf.*_min`` or below
``perf.slow_ratio`` x the allocation's median; ``unreachable`` when no task started there.
A pair low in one pairing only, with neither end slow, is a slow link (both ends named).
Every node failing alike (or srun refusing the step as a whole) is the check's fault, not the
nodes' (:mod:`~clusterkit.preflight.alike`): each node is then ``unjudged``, none is bad.
Exit code: 3 with an unreachable node, else 1 with any node not ok or any slow link, else 0.
"""

from __future__ import annotations

import os
import secrets
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clusterkit.errors import ExitCode
from clusterkit.hostlist import fold
from clusterkit.preflight import alike, perf_claims
from clusterkit.preflight.perf_step import parse_output, run_step, srun_argv, task_errors, tasks_per_node, worker_spec

if TYPE_CHECKING:
    from clusterkit.config.schema import Perf, Site

REPORT_VERSION = 1
STATUSES = ("ok", "slow", "wrong-result", "failed", "unreachable", alike.UNJUDGED)


# ---------------------------------------------------------------------------------------------
# judging
# ---------------------------------------------------------------------------------------------


@dataclass
class Limits:
    """The site's ``perf:`` thresholds (``None``: only the median counts)."""

    gemm_tflops_min: float | None = None
    busbw_intra_gbps_min: float | None = None
    busbw_inter_gbps_min: float | None = None
    slow_ratio: float = 0.8

    @classmethod
    def from_site(cls, perf: Perf) -> Limits:
        return cls(perf.gemm_tflops_min, perf.busbw_intra_gbps_min, perf.busbw_inter_gbps_min, perf.slow_ratio)

    def floor(self, values: Sequence[float], minimum: float | None) -> float:
        """Below this a figure is low: the site's minimum or slow_ratio x the median, the higher."""
        rel = self.slow_ratio * statistics.median(values) if values else 0.0
        return max(rel, minimum or 0.0)


@dataclass
class NodeVerdict:
    host: str
    status: str = "ok"
    reasons: list[str] = field(default_factory=list)
    gemm_tflops: float | None = None
    busbw_intra_gbps: float | None = None
    busbw_inter_gbps: list[dict[str, Any]] = field(default_factory=list)
    checksum_match: bool | None = None
    checks: list[dict[str, str]] = field(default_factory=list)

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons) if self.reasons else "ok"

    def mark(self, status: str, check: str, message: str) -> None:
        if STATUSES.index(status) > STATUSES.index(self.status):
            self.status = status
        self.reasons.append(message)
        self.checks.append({"check": check, "status": "fail", "message": message})

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "status": self.status, "reachable": self.status != "unreachable",
                "reason": self.reason, "gemm_tflops": self.gemm_tflops, "busbw_intra_gbps": self.busbw_intra_gbps,
                "busbw_inter_gbps": list(self.busbw_inter_gbps), "checksum_match": self.checksum_match,
                "checks": list(self.checks)}


@dataclass
class PerfReport:
    site: str
    stage: str
    transport: str
    hosts: Sequence[str]
    nodes: list[NodeVerdict]
    slow_links: list[dict[str, Any]] = field(default_factory=list)
    pairings: list[list[list[str]]] = field(default_factory=list)
    busbw_world_gbps: float | None = None
    medians: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    backend: str | None = None
    elapsed_s: float = 0.0
    startup_s: float | None = None   # imports and process-group set-up, the slowest task
    measure_s: float | None = None   # the measurement, the slowest task
    import_s: float | None = None    # of start-up: the imports (Python start to torch), the slowest task
    init_s: float | None = None      # of start-up: process group, groups, first barrier, the slowest task
    interrupted: bool = False
    common_fault: str | None = None  # the check failed on every node alike: see alike

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in STATUSES}
        for n in self.nodes:
            out[n.status] += 1
        if not out[alike.UNJUDGED]:   # there only when the check failed on every node alike
            del out[alike.UNJUDGED]
        out["unchecked"] = 0
        return out

    def with_status(self, *statuses: str) -> list[str]:
        return [n.host for n in self.nodes if n.status in statuses]

    def exit_code(self) -> ExitCode:
        if self.with_status("unreachable"):
            return ExitCode.UNREACHABLE
        if self.with_status("slow", "wrong-result", "failed", alike.UNJUDGED) or self.slow_links:
            return ExitCode.FAILURE
        return ExitCode.OK

    def groups(self) -> list[dict[str, Any]]:
        buckets: dict[tuple[str, str], list[str]] = {}
        for n in self.nodes:
            buckets.setdefault((n.status, n.reason if n.status != "ok" else ""), []).append(n.host)
        order = {s: i for i, s in enumerate((alike.UNJUDGED, "unreachable", "failed", "wrong-result", "slow", "ok"))}
        out = [{"status": s, "count": len(h), "nodes": fold(h), "lines": [r] if r else []}
               for (s, r), h in buckets.items()]
        return sorted(out, key=lambda g: (order[g["status"]], -g["count"], g["nodes"]))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: preflight's report shape, with ``perf`` figures per node and overall."""
        return {
            "version": REPORT_VERSION, "site": self.site, "stage": self.stage, "transport": self.transport,
            "exit_code": int(self.exit_code()), "interrupted": self.interrupted,
            "elapsed_s": round(self.elapsed_s, 3), "counts": self.counts(),
            "failed": fold(self.with_status("slow", "wrong-result", "failed")),
            "unreachable": fold(self.with_status("unreachable")), "unchecked": "",
            "common_fault": self.common_fault, "notes": list(self.notes), "groups": self.groups(),
            "checks": [{"check": "perf.gemm", "what": "matmul TFLOP/s and result checksum per task"},
                       {"check": "perf.intra", "what": "all-reduce busbw within each node, Gbit/s"},
                       {"check": "perf.inter", "what": "all-reduce busbw of node pairs per pairing, Gbit/s"}],
            "slow_links": list(self.slow_links),
            "perf": {"backend": self.backend, "pairings": self.pairings, "busbw_world_gbps": self.busbw_world_gbps,
                     "medians": dict(self.medians), "startup_s": self.startup_s, "measure_s": self.measure_s,
                     "import_s": self.import_s, "init_s": self.init_s},
            "nodes": [n.to_dict() for n in self.nodes],
        }


def _g(x: float) -> str:
    return f"{x:.3g}"


@dataclass
class _Seen:
    """What the tasks printed: each rank's events by kind, and the ranks each node started."""
    by_rank: dict[int, dict[str, list[dict[str, Any]]]]
    ranks_on: dict[str, list[int]]

    def every(self, ev: str) -> list[dict[str, Any]]:
        return [e for evs in self.by_rank.values() for e in evs.get(ev, [])]

    def on(self, host: str, ev: str) -> list[dict[str, Any]]:
        return [e for r in self.ranks_on[host] for e in self.by_rank[r].get(ev, [])]


def judge(hosts: Sequence[str], events: Sequence[dict[str, Any]], limits: Limits, *, tasks_per_node: int = 1,
          task_stderr: dict[int, str] | None = None, srun_lines: Sequence[str] = (),
          step_failed: str | None = None) -> PerfReport:
    """The verdicts from the figures the tasks printed (see the module docstring): one pass per
    check, each marking the nodes it finds wanting.

    ``task_stderr``: each task's last stderr line (the error shown for a task that stopped);
    ``srun_lines``: srun's own messages; ``step_failed``: why the step as a whole ended early
    (a time-out), added to the reason of every node that did not finish.
    """
    nodes = {h: NodeVerdict(h) for h in hosts}
    events, claimed = perf_claims.attribute(events, tasks_per_node, hosts)
    by_rank: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for ev in events:
        by_rank.setdefault(int(ev["rank"]), {}).setdefault(str(ev["ev"]), []).append(ev)
    host_of = {r: evs["start"][0]["host"] for r, evs in by_rank.items() if "start" in evs}
    seen = _Seen(by_rank, {h: sorted(r for r, x in host_of.items() if x == h) for h in hosts})
    report = PerfReport("", "", "srun", list(hosts), list(nodes.values()))
    _timings(report, seen)
    for h in hosts:
        _failures(nodes[h], seen, tasks_per_node, claimed.get(h), task_stderr or {}, srun_lines, step_failed)
    _compute(nodes, seen, limits, report)
    _within(nodes, seen, limits, report, tasks_per_node)
    if any(e.get("shared_kernel") is True for e in seen.every("init")):
        report.notes.append("nodes share one kernel (namespaces or containers of one machine): their matmuls "
                            "and the pairs of a round were measured one at a time")
    if _between(nodes, seen, limits, report) and len(nodes) == 2:
        report.notes.append("two nodes make one pair: a low pair is reported as a slow link (which end is slow "
                            "needs a third node)")
    return _alike(report, started=bool(host_of), srun_lines=srun_lines)


def _timings(report: PerfReport, seen: _Seen) -> None:
    inits, dones = seen.every("init"), seen.every("done")
    if inits:
        report.backend = str(inits[0]["backend"])
        report.startup_s = max(float(e["import_s"]) + float(e["init_s"]) for e in inits)
        report.import_s = max(float(e["import_s"]) for e in inits)
        report.init_s = max(float(e["init_s"]) for e in inits)
    if dones:
        report.measure_s = max(float(e["measure_s"]) for e in dones)
    if worlds := [float(e["gbps"]) for e in seen.every("world")]:
        report.busbw_world_gbps = min(worlds)


def _failures(v: NodeVerdict, seen: _Seen, tasks_per_node: int, claimed: str | None, task_stderr: dict[int, str],
              srun_lines: Sequence[str], step_failed: str | None) -> None:
    """failed / unreachable: a node whose tasks never started, raised or never finished."""
    ranks = seen.ranks_on[v.host]
    if not ranks:
        said = next((ln for ln in reversed(srun_lines) if v.host in ln), srun_lines[-1] if srun_lines else "")
        v.mark(*(("failed", "perf.start", claimed) if claimed is not None else
                 ("unreachable", "perf.start", f"no task started on {v.host}" + (f": {said}" if said else ""))))
        return
    for r in ranks:
        evs = seen.by_rank[r]
        if "error" in evs:
            v.mark("failed", "perf.task", f"task {r}: {evs['error'][0]['error']}")
        elif "done" not in evs:
            stage = next((k for k in ("world", "pair", "intra", "gemm", "init", "start") if k in evs), "start")
            why = step_failed or task_stderr.get(r) or "no further output"
            v.mark("failed", "perf.task", f"task {r} stopped after its {stage} figures: {why}")
        elif "gemm" not in evs:   # every task prints its matmul figure before it is done
            v.mark("failed", "perf.gemm", f"task {r} finished without a matmul figure that is a finite number")
    if len(ranks) < tasks_per_node and v.status != "failed":
        v.mark("failed", "perf.task", f"{len(ranks)} of {tasks_per_node} tasks started")


def _compute(nodes: dict[str, NodeVerdict], seen: _Seen, limits: Limits, report: PerfReport) -> None:
    """Throughput against the floor, and the checksum against the tasks' majority."""
    gemms = seen.every("gemm")
    if not gemms:
        return
    tally = Counter(e["checksum"] for e in gemms)
    top, count = max(tally.items(), key=lambda kv: (kv[1], kv[0]))
    majority = top if count * 2 > len(gemms) else None
    floor = limits.floor([float(e["tflops"]) for e in gemms], limits.gemm_tflops_min)
    report.medians["gemm_tflops"] = round(statistics.median(float(e["tflops"]) for e in gemms), 6)
    for h, v in nodes.items():
        if not (mine := seen.on(h, "gemm")):
            continue
        worst = min(mine, key=lambda e: float(e["tflops"]))
        v.gemm_tflops = float(worst["tflops"])
        wrong = [e for e in mine if e["checksum"] != majority]
        v.checksum_match = not wrong
        if wrong:
            what = ("differs from the allocation's majority" if majority is not None
                    else "no majority among the tasks' checksums")
            v.mark("wrong-result", "perf.gemm",
                   f"matmul checksum {what} (task {', '.join(str(e['rank']) for e in wrong)})")
        if v.gemm_tflops < floor:
            v.mark("slow", "perf.gemm", f"matmul {_g(v.gemm_tflops)} TFLOP/s (local task {worst['local']}), "
                                        f"below {_g(floor)} ({_basis(limits.gemm_tflops_min, limits)})")


def _within(nodes: dict[str, NodeVerdict], seen: _Seen, limits: Limits, report: PerfReport,
            tasks_per_node: int) -> None:
    """The all-reduce within each node: its slowest task's figure against the floor."""
    intra = {h: min(figs) for h in nodes if (figs := [float(e["gbps"]) for e in seen.on(h, "intra")])}
    if not intra:
        if tasks_per_node == 1 and nodes:
            report.notes.append("one task per node: the all-reduce within a node is skipped")
        return
    floor = limits.floor(list(intra.values()), limits.busbw_intra_gbps_min)
    report.medians["busbw_intra_gbps"] = round(statistics.median(intra.values()), 4)
    for h, gbps in intra.items():
        nodes[h].busbw_intra_gbps = gbps
        if gbps < floor:
            nodes[h].mark("slow", "perf.intra", f"all-reduce within the node {_g(gbps)} Gbit/s, below "
                                                f"{_g(floor)} ({_basis(limits.busbw_intra_gbps_min, limits)})")


def _between(nodes: dict[str, NodeVerdict], seen: _Seen, limits: Limits, report: PerfReport) -> bool:
    """Node pairs, round by round: a node low with every peer is slow; a low pair between two
    nodes that are not is a slow link.  False when no pair was measured.

    A pair's figure in a sweep is its lower end's (the two ends time the same all-reduces); its
    figure is its best sweep's: other work on a node slows the pairings it has in one sweep, a
    slow link or NIC is slow in all of them (perf_worker.PAIR_SWEEPS).  Only a sweep both ends
    printed counts, so one end cannot raise its pair with a sweep of its own (where no sweep has
    both, the pair's lowest figure is its figure)."""
    sweeps: dict[tuple[int, str, str], dict[int, tuple[float, frozenset[str]]]] = {}
    for ev in seen.every("pair"):
        a, b = ev["pair"]
        sweep = ev.get("sweep", 1)   # a worker before sweeps printed one
        per = sweeps.setdefault((int(ev["round"]), str(a), str(b)), {})
        fig, ends = per.get(sweep, (float("inf"), frozenset()))
        per[sweep] = (min(fig, float(ev["gbps"])), ends | {str(ev["host"])})
    pairs = {k: _best_sweep(per) for k, per in sweeps.items()}
    rounds = sorted({k[0] for k in pairs})
    report.pairings = [[[a, b] for (r, a, b) in sorted(pairs) if r == k] for k in rounds]
    if not pairs:
        return False
    floor = limits.floor(list(pairs.values()), limits.busbw_inter_gbps_min)
    report.medians["busbw_inter_gbps"] = round(statistics.median(pairs.values()), 4)
    low = {k for k, g in pairs.items() if g < floor}
    slow_nodes: set[str] = set()
    for h, v in nodes.items():
        peers = sorted((k, g) for k, g in pairs.items() if h in k[1:])
        v.busbw_inter_gbps = [{"round": k[0], "peer": k[2] if k[1] == h else k[1], "gbps": g,
                               "sweeps": [sweeps[k][n][0] for n in sorted(sweeps[k])]} for k, g in peers]
        if len(peers) >= 2 and all(k in low for k, _ in peers):
            slow_nodes.add(h)
            shown = ", ".join(_g(g) for _, g in peers)
            basis = _basis(limits.busbw_inter_gbps_min, limits)
            v.mark("slow", "perf.inter", f"all-reduce with every peer low ({shown} Gbit/s in {len(peers)} "
                                         f"pairings), below {_g(floor)} ({basis})")
    report.slow_links += [{"nodes": [a, b], "round": r, "gbps": pairs[(r, a, b)], "floor": round(floor, 4)}
                          for (r, a, b) in sorted(low) if a not in slow_nodes and b not in slow_nodes]
    return True


def _best_sweep(per: dict[int, tuple[float, frozenset[str]]]) -> float:
    """A pair's figure: its best sweep of those both ends printed, else its lowest figure."""
    both = [low for low, ends in per.values() if len(ends) == 2]
    return max(both) if both else min(low for low, _ in per.values())


def _alike(report: PerfReport, *, started: bool, srun_lines: Sequence[str]) -> PerfReport:
    """Every node failing alike, or srun refusing the step before any task started (an error
    naming no node): the check's fault; each node becomes ``unjudged``, its reason kept."""
    refused = [ln for ln in srun_lines if "error" in ln.lower() and not any(h in ln for h in report.hosts)]
    if not started and refused and report.nodes:
        fault: str | None = alike.bounded(refused[-1])
    else:
        fault = alike.common_fault((v.host, v.status not in ("ok", "unreachable"), v.reasons) for v in report.nodes)
    if fault is not None:
        report.common_fault = fault
        for v in report.nodes:
            v.status = alike.UNJUDGED
    return report


def _basis(minimum: float | None, limits: Limits) -> str:
    rel = f"{limits.slow_ratio:g} x the allocation's median"
    return f"the site's minimum {minimum:g} or {rel}" if minimum else rel


# ---------------------------------------------------------------------------------------------
# the whole check
# ---------------------------------------------------------------------------------------------


def run_perf(site: Site, hosts: Sequence[str], *, stage: str, srun_args: Sequence[str] = (),
             extra_srun_args: Sequence[str] = (), env: dict[str, str] | None = None) -> PerfReport:
    """Measure ``hosts`` with one srun step and judge them.  ``extra_srun_args`` are the site's
    (partition, account outside an allocation), ``srun_args`` the user's."""
    marker = f"@@ck-perf-{secrets.token_hex(6)}"
    port = 32000 + secrets.randbelow(28000)  # job scripts' rendezvous ports are 20000-31999
    spec = worker_spec(site.perf, marker, port)
    env = env if env is not None else dict(os.environ)
    per = tasks_per_node(site, env)
    argv = srun_argv(site, hosts, spec, [*extra_srun_args, *srun_args], per=per)
    t0 = time.monotonic()
    step = run_step(argv, float(site.perf.timeout_s), env=env)
    elapsed = time.monotonic() - t0
    events = parse_output(step.stdout, marker, hosts)
    stderr, srun_lines = task_errors(step.stderr)
    why = (f"the check did not finish in perf.timeout_s={site.perf.timeout_s:g}" if step.timed_out
           else "interrupted" if step.interrupted else None)
    report = judge(hosts, events, Limits.from_site(site.perf), tasks_per_node=per,
                   task_stderr=stderr, srun_lines=srun_lines, step_failed=why)
    report.site, report.stage, report.elapsed_s, report.interrupted = site.name, stage, elapsed, step.interrupted
    return report
