"""A spare is checked again right before a relaunch takes it (docs/architecture.md §3, "Recovery
inside the allocation").

The in-job preflight checked every node of the allocation when the run started; a spare may have
gone bad since (minutes or days of training later).  Before a relaunch puts a spare in a dropped
node's place, the supervisor runs the same check on the new nodes alone (``clusterkit preflight
--transport srun --nodelist NEW --json``, bounded in time and output).  A spare whose verdict is
not ``ok`` or ``warn`` is kept out like a dropped node and the decision is made again without it:
another spare, or a requeue without them all.  The check's own failure (no report, not JSON, out
of time, a check that failed on every node alike) is never a spare's fault: the relaunch goes on,
and the log says the spares went unchecked.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace

from clusterkit.hostlist import HostlistError, check_host, fold
from clusterkit.supervise import replan
from clusterkit.tooltext import load_json, printable

CHECK_TIMEOUT_S = 180.0
CHECK_MAX_OUT = 16 << 20
#: a node the relaunch may take (the in-job preflight's good verdicts; `unjudged`: the check failed alike)
GOOD = ("ok", "warn", "unjudged")
_WHY_MAX = 200
Log = Callable[[str], None]
Check = Callable[[tuple[str, ...]], "dict[str, str] | None"]


def bad_nodes(report: str, nodes: tuple[str, ...]) -> dict[str, str] | None:
    """The nodes of ``nodes`` that ``preflight --json``'s report judges not fit, with a short
    reason each; None when the report is not one (the check's fault, not a node's).  A node the
    report leaves out is not fit (no result)."""
    try:
        data = load_json(report[:CHECK_MAX_OUT])
        entries = data["nodes"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(entries, list):
        return None
    seen: dict[str, str] = {}
    for node in entries[:100_000]:
        if not (isinstance(node, dict) and isinstance(node.get("host"), str) and isinstance(node.get("status"), str)):
            continue
        try:
            host = check_host(node["host"])
        except HostlistError:
            continue
        if host in nodes and host not in seen:
            seen[host] = "" if node["status"] in GOOD else _why(node)
    return {h: seen.get(h, "no result in the check") for h in nodes if seen.get(h, "no result in the check")}


def _why(node: dict[str, object]) -> str:
    checks = node.get("checks")
    failed = [f"{str(c.get('check', '?'))[:60]}: {c['message']}" for c in (checks if isinstance(checks, list) else [])
              if isinstance(c, dict) and c.get("status") in ("fail", "failed") and isinstance(c.get("message"), str)]
    error = node.get("error")
    text = "; ".join([str(node["status"]), *([error] if isinstance(error, str) and error else []), *failed[:4]])
    return printable(text)[:_WHY_MAX]


def preflight(site: str, stage: str, log: Log) -> Check:
    """The check of new nodes, as the job's start ran it: ``clusterkit preflight`` over srun."""
    def check(nodes: tuple[str, ...]) -> dict[str, str] | None:
        # the supervisor's own Python, which imports clusterkit (the job script chose it), not a
        # `clusterkit` that PATH may or may not hold on the batch host
        argv = [sys.executable, "-m", "clusterkit", "preflight", "--site", site, "--stage", stage,
                "--transport=srun", "--nodelist", fold(nodes), "--json"]
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  timeout=CHECK_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log(f"recovery: the check of {fold(nodes)} did not finish ({printable(str(exc))[:120]}): "
                "the spares go unchecked")
            return None
        bad = bad_nodes(proc.stdout[:CHECK_MAX_OUT].decode("utf-8", errors="replace"), nodes) \
            if proc.returncode in (0, 1, 3) else None   # preflight: 0 all ok, 1 some bad, 3 some unreachable
        if bad is None:
            log(f"recovery: the check of {fold(nodes)} gave no report (exit {proc.returncode}): "
                "the spares go unchecked")
        return bad
    return check


def checked(v: replan.Verdict, down: list[str], facts: replan.Attempted, check: Check | None,
            log: Log) -> replan.Step:
    """:func:`replan.next_step`, with every node a relaunch would newly take checked first; a node
    that fails is kept out (and named among the dropped) and the step decided again."""
    step = replan.next_step(v, down, facts)
    failed: list[tuple[str, str]] = []
    while check is not None and isinstance(step, replan.Relaunch):
        new = tuple(h for h in step.nodes if h not in facts.nodes)
        bad = check(new) if new else None
        if not bad:
            break
        log(f"recovery: spare(s) failed their check before the relaunch: "
            f"{', '.join(f'{h} ({why})' for h, why in bad.items())}")
        failed += [(h, f"attempt {facts.attempt}: spare failed its check: {why}"[:300]) for h, why in bad.items()]
        facts = replace(facts, unused=tuple(h for h in facts.unused if h not in bad),
                        excluded=tuple(dict.fromkeys([*facts.excluded, *bad])))
        step = replan.next_step(v, down, facts)
    return replace(step, dropped=(*step.dropped, *failed)) if failed else step
