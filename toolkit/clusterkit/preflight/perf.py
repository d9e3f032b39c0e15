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

import json
import os
import secrets
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clusterkit.errors import ExitCode
from clusterkit.hostlist import fold
from clusterkit.preflight import alike, perf_claims
from clusterkit.preflight.perf_step import held_gpus, parse_output, run_step, task_errors

if TYPE_CHECKING:
    from clusterkit.config.schema import Perf, Site

REPORT_VERSION = 1
STATUSES = ("ok", "slow", "wrong-result", "failed", "unreachable", alike.UNJUDGED)


# ---------------------------------------------------------------------------------------------
# what runs
# ---------------------------------------------------------------------------------------------


def tasks_per_node(site: Site, env: dict[str, str] | None = None) -> int:
    """One task per GPU (NCCL), one per node on the CPU (gloo); inside a job (``env``) one per GPU
    the job holds on a node, where that is fewer than the site's (a job on part of a node)."""
    if site.perf.backend == "gloo":
        return 1
    held = held_gpus(env) if env is not None else None
    return min(int(site.nodes.gpus_per_node), held) if held else int(site.nodes.gpus_per_node)


def worker_spec(perf: Perf, marker: str, port: int) -> dict[str, Any]:
    """What every task is told (one JSON argument)."""
    return {"marker": marker, "port": port, "backend": perf.backend, "timeout_s": perf.timeout_s,
            "rounds": perf.rounds, "gemm_n": perf.gemm_n, "gemm_iters": perf.gemm_iters,
            "warmup": perf.warmup, "iters": perf.iters,
            "intra_bytes": int(perf.intra_message_mb * 1e6), "inter_bytes": int(perf.inter_message_mb * 1e6)}


def srun_argv(site: Site, hosts: Sequence[str], spec: dict[str, Any], extra_args: Sequence[str] = (),
              python: str | None = None, srun: str = "srun", per: int | None = None) -> list[str]:
    """The one srun step of the check: every task runs the worker with the same spec.

    Sized within any allocation that holds the nodes: one CPU a task, and ``--overcommit`` where
    the job holds fewer CPUs than the step has tasks (never "More processors requested than
    permitted" because the job asked for one task with many CPUs, whose count srun would inherit)."""
    per = per or tasks_per_node(site)
    n = len(hosts)
    gpus = [] if site.perf.backend == "gloo" else ["--gpus-per-task=1"]
    return [srun, "--nodes", str(n), "--ntasks", str(n * per), "--ntasks-per-node", str(per),
            "--nodelist", fold(hosts), "--label", "--kill-on-bad-exit=0", "--overlap",
            "--cpus-per-task", "1", "--overcommit", "--job-name", "clusterkit-perf", *gpus, *extra_args,
            python or sys.executable, "-m", "clusterkit.preflight.perf_worker",
            json.dumps(spec, separators=(",", ":"))]


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


def judge(hosts: Sequence[str], events: Sequence[dict[str, Any]], limits: Limits, *, tasks_per_node: int = 1,
          task_stderr: dict[int, str] | None = None, srun_lines: Sequence[str] = (),
          step_failed: str | None = None) -> PerfReport:
    """The verdicts from the figures the tasks printed (see the module docstring).

    ``task_stderr``: each task's last stderr line (the error shown for a task that stopped);
    ``srun_lines``: srun's own messages; ``step_failed``: why the step as a whole ended early
    (a time-out), added to the reason of every node that did not finish.
    """
    task_stderr = task_stderr or {}
    nodes = {h: NodeVerdict(h) for h in hosts}
    events, claimed = perf_claims.attribute(events, tasks_per_node, hosts)
    by_rank: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for ev in events:
        by_rank.setdefault(int(ev["rank"]), {}).setdefault(str(ev["ev"]), []).append(ev)
    host_of = {r: evs["start"][0]["host"] for r, evs in by_rank.items() if "start" in evs}
    ranks_on: dict[str, list[int]] = {h: sorted(r for r, x in host_of.items() if x == h) for h in hosts}
    report = PerfReport("", "", "srun", list(hosts), list(nodes.values()))
    inits = [e for evs in by_rank.values() for e in evs.get("init", [])]
    if inits:
        report.backend = str(inits[0]["backend"])
        report.startup_s = max(float(e["import_s"]) + float(e["init_s"]) for e in inits)
        report.import_s = max(float(e["import_s"]) for e in inits)
        report.init_s = max(float(e["init_s"]) for e in inits)
    dones = [e for evs in by_rank.values() for e in evs.get("done", [])]
    if dones:
        report.measure_s = max(float(e["measure_s"]) for e in dones)

    # failed / unreachable: a task that raised or never finished
    for h, ranks in ranks_on.items():
        v = nodes[h]
        if not ranks:
            said = next((ln for ln in reversed(srun_lines) if h in ln), srun_lines[-1] if srun_lines else "")
            v.mark(*(("failed", "perf.start", claimed[h]) if h in claimed else
                     ("unreachable", "perf.start", f"no task started on {h}" + (f": {said}" if said else ""))))
            continue
        for r in ranks:
            evs = by_rank[r]
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

    # compute: throughput and checksum
    gemms = [e for evs in by_rank.values() for e in evs.get("gemm", [])]
    if gemms:
        tally: dict[str, int] = {}
        for e in gemms:
            tally[e["checksum"]] = tally.get(e["checksum"], 0) + 1
        top, count = max(tally.items(), key=lambda kv: (kv[1], kv[0]))
        majority = top if count * 2 > len(gemms) else None
        floor = limits.floor([float(e["tflops"]) for e in gemms], limits.gemm_tflops_min)
        report.medians["gemm_tflops"] = round(statistics.median(float(e["tflops"]) for e in gemms), 6)
        for h, ranks in ranks_on.items():
            mine = [e for r in ranks for e in by_rank[r].get("gemm", [])]
            if not mine:
                continue
            v = nodes[h]
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

    # within a node
    intra: dict[str, float] = {}
    for h, ranks in ranks_on.items():
        figs = [float(e["gbps"]) for r in ranks for e in by_rank[r].get("intra", [])]
        if figs:
            intra[h] = min(figs)
    if intra:
        floor = limits.floor(list(intra.values()), limits.busbw_intra_gbps_min)
        report.medians["busbw_intra_gbps"] = round(statistics.median(intra.values()), 4)
        for h, gbps in intra.items():
            nodes[h].busbw_intra_gbps = gbps
            if gbps < floor:
                nodes[h].mark("slow", "perf.intra", f"all-reduce within the node {_g(gbps)} Gbit/s, below "
                                                    f"{_g(floor)} ({_basis(limits.busbw_intra_gbps_min, limits)})")
    elif tasks_per_node == 1 and len(hosts) > 0:
        report.notes.append("one task per node: the all-reduce within a node is skipped")

    # between nodes
    pairs: dict[tuple[int, str, str], float] = {}
    for ev in (e for evs in by_rank.values() for e in evs.get("pair", [])):
        a, b = ev["pair"]
        key = (int(ev["round"]), str(a), str(b))
        pairs[key] = min(pairs.get(key, float("inf")), float(ev["gbps"]))
    rounds = sorted({k[0] for k in pairs})
    report.pairings = [[[a, b] for (r, a, b) in sorted(pairs) if r == k] for k in rounds]
    if pairs:
        floor = limits.floor(list(pairs.values()), limits.busbw_inter_gbps_min)
        report.medians["busbw_inter_gbps"] = round(statistics.median(pairs.values()), 4)
        low = {k for k, g in pairs.items() if g < floor}
        slow_nodes: set[str] = set()
        for h in hosts:
            peers = sorted((k, g) for k, g in pairs.items() if h in k[1:])
            nodes[h].busbw_inter_gbps = [{"round": k[0], "peer": k[2] if k[1] == h else k[1], "gbps": g}
                                         for k, g in peers]
            if len(peers) >= 2 and all(k in low for k, _ in peers):
                slow_nodes.add(h)
                shown = ", ".join(_g(g) for _, g in peers)
                nodes[h].mark("slow", "perf.inter", f"all-reduce with every peer low ({shown} Gbit/s in "
                                                    f"{len(peers)} pairings), below {_g(floor)} "
                                                    f"({_basis(limits.busbw_inter_gbps_min, limits)})")
        for k in sorted(low):
            r, a, b = k
            if a in slow_nodes or b in slow_nodes:
                continue
            report.slow_links.append({"nodes": [a, b], "round": r, "gbps": pairs[k], "floor": round(floor, 4)})
    worlds = [float(e["gbps"]) for evs in by_rank.values() for e in evs.get("world", [])]
    if worlds:
        report.busbw_world_gbps = min(worlds)
    if any(e.get("shared_kernel") is True for e in inits):
        report.notes.append("nodes share one kernel (namespaces or containers of one machine): their matmuls "
                            "and the pairs of a round were measured one at a time")
    if len(hosts) == 2 and pairs:
        report.notes.append("two nodes make one pair: a low pair is reported as a slow link (which end is slow "
                            "needs a third node)")
    return _alike(report, started=bool(host_of), srun_lines=srun_lines)


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
