"""After a hang that names no node, the pairwise performance check on the allocation (docs/architecture.md
§3, "Watching a run"; docs/jobs.md, "When the run stops making progress").

A stall where neither the ranks' heartbeats nor their stack dumps name a rank behind (every rank
waits in a collective) is often a slow or cut link: every rank waits on the one transfer that does
not finish.  Where the site's ``watch.recheck_after_hang`` is on (the job script passes
``--hang-check-site``), recovery first runs ``clusterkit preflight --perf`` on the attempt's nodes
and the allocation's spares (one srun step, ``--overlap``, bounded by the site's
``perf.timeout_s`` and by ``--hang-check-s``), with the launch step already ended.  Its verdict
(:func:`finding`, pure):

- exactly one of the attempt's nodes below par (slow, wrong result, failed, unreachable): that
  node is the node behind, and recovery drops it as it drops a named one;
- several of them, or every node checked: none is named (the check's fault, or more than one
  node to blame), and recovery goes on as it would without the check;
- a spare below par is kept out of the relaunch;
- no report (the check failed to run, out of time): as without the check.

The job log says the check ran and what it found; the attempts record (``clusterkit status``)
carries it in the attempt's verdict.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

from clusterkit.hostlist import HostlistError, check_host, fold
from clusterkit.supervise import recheck, recovery, replan
from clusterkit.tooltext import load_json, printable

Log = Callable[[str], None]
#: the check's report text for these nodes; None when it gave none (said in the log)
Check = Callable[[tuple[str, ...]], "str | None"]
UNKNOWN = "; node behind: unknown"   # what watch.stalled_verdict says when nothing named a node
_WHY_MAX = 160


@dataclass(frozen=True)
class Finding:
    """What the check after a hang found: the node to drop (or none), what to say, the spares to keep out."""

    node: str | None
    said: str
    spares: tuple[str, ...] = ()


def slow_links(report: str) -> list[tuple[str, str]]:
    """The links ``preflight --perf --json`` names slow with neither end slow (both ends), at most 20."""
    try:
        links = load_json(report[:recheck.CHECK_MAX_OUT])["slow_links"]
    except (ValueError, KeyError, TypeError):
        return []
    found: list[tuple[str, str]] = []
    for link in links[:1000] if isinstance(links, list) else []:
        ends = link.get("nodes") if isinstance(link, dict) else None
        if isinstance(ends, list) and len(ends) == 2 and all(isinstance(h, str) for h in ends):
            try:
                pair = (check_host(ends[0]), check_host(ends[1]))
            except HostlistError:
                continue
            if pair not in found:
                found.append(pair)
    return found[:20]


def _short(why: str) -> str:
    """The check's reason for a node, printable, cut at a word within :data:`_WHY_MAX` characters."""
    text = printable(why)
    return text if len(text) <= _WHY_MAX else text[:_WHY_MAX].rsplit(" ", 1)[0] + " ..."


def finding(report: str | None, nodes: tuple[str, ...], spares: tuple[str, ...]) -> Finding:
    """The check's verdict on the attempt's ``nodes`` and the ``spares`` (pure): the one node of
    the attempt below par, or none with the reason."""
    checked = tuple(dict.fromkeys([*nodes, *spares]))
    bad = recheck.bad_nodes(report, checked) if report is not None else None
    if bad is None:
        return Finding(None, "no report from the check: no node named")
    if len(checked) > 1 and len(bad) == len(checked):
        return Finding(None, f"every node checked is below par ({fold(checked)}): the check's fault, no node named")
    kept_out = tuple(h for h in spares if h in bad and h not in nodes)
    spare_said = f"; spare(s) below par, not taken: {', '.join(kept_out)}" if kept_out else ""
    mine = [h for h in nodes if h in bad]
    if len(mine) == 1:
        return Finding(mine[0], f"{mine[0]} below par ({_short(bad[mine[0]])}){spare_said}", kept_out)
    if mine:   # each one's reason too (the first two): the figures the next look at a false "slow" needs
        why = "; ".join(f"{h}: {_short(bad[h])}" for h in mine[:2])
        return Finding(None, f"{len(mine)} nodes below par ({', '.join(mine[:8])}{' ...' * (len(mine) > 8)}): "
                       f"no one node to drop ({why}){spare_said}", kept_out)
    links = slow_links(report or "")
    said = (f"no node below par; slow link(s) with neither end slow: "
            f"{', '.join(f'{a}-{b}' for a, b in links[:4])}" if links else "no node below par")
    return Finding(None, said + spare_said, kept_out)


def with_finding(v: replan.Verdict, found: Finding) -> replan.Verdict:
    """The stall's verdict with what the check found: its node behind where it names one."""
    if found.node is None:
        return replace(v, summary=f"{v.summary}; performance check after the hang: {found.said}")
    stall = v.summary.split(UNKNOWN, 1)[0]
    return replace(v, summary=f"{stall}; node behind: {found.said}, by the performance check after the hang",
                   node=found.node, rank=None)


def wanted(v: replan.Verdict) -> bool:
    """Whether the check runs: a stall that named no node (on one node or on several)."""
    return v.category == "stall" and v.node is None


def perf_check(site: str, stage: str, timeout_s: float, log: Log) -> Check:
    """``clusterkit preflight --perf`` over srun, as the job's start runs its check (the
    supervisor's own Python), bounded in time and output."""
    def check(nodes: tuple[str, ...]) -> str | None:
        argv = [sys.executable, "-m", "clusterkit", "preflight", "--perf", "--site", site, "--stage", stage,
                "--transport=srun", "--nodelist", fold(nodes), "--json"]
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log(f"recovery: the performance check did not finish ({printable(str(exc))[:120]})")
            return None
        if proc.returncode not in (0, 1, 3):   # preflight --perf: 0 all ok, 1 some below par, 3 some unreachable
            log(f"recovery: the performance check gave no report (exit {proc.returncode})")
            return None
        return proc.stdout[:recheck.CHECK_MAX_OUT].decode("utf-8", errors="replace")
    return check


def after_hang(v: replan.Verdict, run: recovery.Run, check: Check | None, log: Log) -> replan.Verdict:
    """The stall's verdict after the check (unchanged where it does not run); a spare it finds
    below par leaves ``run``'s spares."""
    if check is None or not wanted(v):
        return v
    nodes, spares = run.nodes, run.unused
    log(f"recovery: no node named for the hang: running the performance check on {fold((*nodes, *spares))}")
    found = finding(check((*nodes, *spares)), nodes, spares)
    log(f"recovery: the performance check after the hang: {found.said}"
        + ("" if found.node else ": recovery goes on as without it"))
    run.unused = tuple(h for h in spares if h not in found.spares)
    return with_finding(v, found)
