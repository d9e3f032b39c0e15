"""Root cause, not cascade: from findings (and Slurm's facts) to one verdict per restart.

Order: (a) Slurm's own facts (node failure, preemption, time limit, memory kill, cancel);
(b) the earliest failure that is not a cascade symptom, ties broken by the lowest rank, with
torchrun's per-node "Root Cause" entries as first-class evidence; (c) only cascade symptoms:
``nccl-timeout``, naming the rank that is behind (the lowest collective sequence number a
watchdog printed, compared within one process group).  A job Slurm saw complete is ``ok``
whatever its logs hold; so are logs with no failure, no cascade symptom and no error exit.
``unknown`` is left for a failure no family explains.

Location: the finding's own node and rank; else torchrun's Root Cause entry of that rank;
local ranks become global through the Root Cause entries (or as they are, where the logs name
one node at most); else the task srun saw fail (its id is the rank where no torchrun agent ran).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from clusterkit.diagnose import catalogue
from clusterkit.diagnose.behind import behind as _behind
from clusterkit.diagnose.evidence import MAX_EVIDENCE as MAX_EVIDENCE  # re-exported
from clusterkit.diagnose.evidence import dedup as _dedup
from clusterkit.diagnose.evidence import ev as _ev
from clusterkit.diagnose.evidence import key as _key
from clusterkit.diagnose.evidence import make as _verdict
from clusterkit.diagnose.evidence import rank_words
from clusterkit.diagnose.reader import FileScan, Finding, RootCause, TaskExit
from clusterkit.scheduler import traits

_INNER_PREFIX = re.compile(r"^ ?\[(?:rank|default)\d{1,9}\]:")

# Slurm states that are themselves the answer, strongest first
_SLURM_STATES = {"NODE_FAIL": "slurm-node-failure", "BOOT_FAIL": "slurm-node-failure", "PREEMPTED": "slurm-preempted",
                 "TIMEOUT": "slurm-time-limit", "DEADLINE": "slurm-time-limit", "OUT_OF_MEMORY": "host-oom"}
_SLURM_ORDER = ("slurm-node-failure", "slurm-preempted", "slurm-time-limit", "host-oom", "slurm-cancelled")
# verdicts about the whole job, not a node: "the node" of one of them is only where slurmstepd wrote it
_NO_NODE = frozenset({"slurm-preempted", "slurm-time-limit", "slurm-cancelled"})


@dataclass
class Attempt:
    """Everything the logs say about one run (restart) of the job."""

    restart: int
    findings: list[Finding] = field(default_factory=list)
    root_causes: list[RootCause] = field(default_factory=list)
    task_exits: list[TaskExit] = field(default_factory=list)
    worker_exits: list[Finding] = field(default_factory=list)
    cascade: Counter[str] = field(default_factory=Counter)
    cascade_ranks: dict[str, set[int]] = field(default_factory=dict)
    success: bool = False
    clean_exit: bool = False


@dataclass(frozen=True)
class SlurmView:
    """What Slurm says about the newest run: its state and the nodes it holds down."""

    state: str | None = None
    reason: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    down_nodes: tuple[tuple[str, str], ...] = ()
    nodes: str | None = None
    scheduler: str = "slurm"  # whose view it is: "slurm", or "local" (submitit's local executor)

    @property
    def who(self) -> str:
        """How evidence names this view: ``slurm``, or ``local executor`` (never "slurm" for it)."""
        return traits(self.scheduler).who


def attempts(scans: Iterable[FileScan]) -> dict[int, Attempt]:
    """Group every file's findings by restart."""
    out: dict[int, Attempt] = {}

    def at(r: int) -> Attempt:
        return out.setdefault(r, Attempt(r))

    for s in scans:
        for r in s.restarts:
            at(r)
        for f in s.findings:
            at(f.restart).findings.append(f)
        for rc in s.root_causes:
            at(rc.restart).root_causes.append(rc)
        for te in s.task_exits:
            at(te.restart).task_exits.append(te)
        for we in s.worker_exits:
            at(we.restart).worker_exits.append(we)
        for (r, kind), n in s.cascade.items():
            at(r).cascade[kind] += n
            at(r).cascade_ranks.setdefault(kind, set()).update(s.cascade_ranks.get((r, kind), set()))
        for r in s.success:
            at(r).success = True
        for r in s.clean_exit:
            at(r).clean_exit = True
    return out


def _slurm_fact(att: Attempt, view: SlurmView | None) -> dict[str, Any] | None:
    facts = sorted((f for f in att.findings if f.slurm), key=_key)
    state_cat = _SLURM_STATES.get(view.state or "") if view else None
    if view and view.state == "CANCELLED":
        state_cat = "slurm-cancelled"
    cats = {f.category for f in facts} | ({state_cat} if state_cat else set())
    for cat in _SLURM_ORDER:
        if cat not in cats:
            continue
        # srun names the node that failed; slurmstepd on the survivors only says that one did
        lead = next((f for f in facts if f.category == cat and "Node failure on" in f.text), None) \
            or next((f for f in facts if f.category == cat), None)
        rest = sorted((f for f in facts if f.category == cat and f is not lead), key=lambda f: (f.path, f.lineno))
        evidence = _dedup(([_ev(lead)] if lead else []) + [_ev(f) for f in rest])
        node = None
        if view and cat == "slurm-node-failure" and view.down_nodes:
            node = None if lead and "Node failure on" in lead.text else view.down_nodes[0][0]
            evidence.insert(0, f"{view.who}: " + "; ".join(f"node {n} is down: {r}" for n, r in view.down_nodes))
        elif view and state_cat == cat:
            evidence.insert(0, f"{view.who}: job state {view.state}"
                            + (f", reason {view.reason}" if view.reason else ""))
        summary = None
        if lead and "DUE TO JOB REQUEUE" in lead.text:
            summary = "Slurm requeued this run (scontrol requeue, or a requeue after a failure)"
        # the lead's own node first (srun names the node that failed; slurmstepd on a survivor
        # names itself), then any other line of the fact that names one
        node = node or (lead.node if lead else None) or next((f.node for f in facts if f.category == cat and f.node),
                                                             None)
        rank = next((f.rank for f in facts if f.category == cat and f.rank is not None), None)
        if rank is None and not _torchrun(att):
            rank = next((f.task for f in facts if f.category == cat and f.task is not None), None)
        out = _verdict(cat, lead, evidence, node=node, rank=rank, summary=summary)
        if cat in _NO_NODE:
            out["node"] = None  # slurmstepd writes these on the batch host: no node failed
        return out
    return None


def _torchrun(att: Attempt) -> bool:
    """torchrun's agents ran: an srun task is then a node's agent, not a rank."""
    return bool(att.root_causes) or any(f.local_rank is not None for f in att.findings)


def _root_cause_for(att: Attempt) -> RootCause | None:
    causes = sorted(att.root_causes, key=lambda r: (r.time or float("inf"), r.rank if r.rank is not None else 1 << 30))
    return causes[0] if causes else None


# how soon after the first failing worker (torchrun's Root Cause) a node hears its store close
STORE_CLOSED_WITHIN_S = 5.0


def _after_store_closed(att: Attempt) -> set[int]:
    """The rendezvous errors (by id) that follow, in their own log, the store's connection being
    closed by the other end as the first failing worker's agent ended (within
    ``STORE_CLOSED_WITHIN_S`` of torchrun's Root Cause): that agent hosted the store, and this
    one is a consequence.  A node that heard the close only much later could not hear it sooner
    (its network), and a store that stopped answering (``waitForInput ... timed out``) is a cause."""
    root = _root_cause_for(att)
    if root is None or root.time is None:
        return set()
    closed: dict[str, int] = {}
    for f in att.findings:
        if f.cascade == "connection-reset" and f.time is not None and f.time <= root.time + STORE_CLOSED_WITHIN_S:
            closed[f.path] = min(closed.get(f.path, f.lineno), f.lineno)
    return {id(f) for f in att.findings
            if f.category == "rendezvous" and not f.cascade and f.path in closed
            and closed[f.path] < f.lineno and not catalogue.is_store_timeout(f.text)}


def _first_failure(att: Attempt) -> dict[str, Any] | None:
    consequences = _after_store_closed(att)
    causes = sorted((f for f in att.findings if not f.cascade and not f.slurm and id(f) not in consequences),
                    key=_key)
    root = _root_cause_for(att)
    if not causes:
        if root is None:
            return None
        ev = [f"{root.path}:{root.lineno}: torchrun root cause: rank {root.rank} on {root.node}, "
              f"exit code {root.exitcode}"]
        return _verdict("unknown", None, ev, node=root.node, rank=root.rank, time=root.time,
                        summary=f"rank {root.rank} failed first (exit code {root.exitcode}) with no known signature")
    lead = causes[0]
    rank = lead.rank
    if root is not None:
        # torchrun's agent saw this worker fail first: prefer its own error where the times tie
        # (log times have a second's resolution, and ranks on other nodes fail within it)
        own = [f for f in causes if _written_by(f, root)]
        if own and (own[0].time is None or lead.time is None or own[0].time <= lead.time + 2):
            lead = own[0]
            rank = lead.rank if lead.rank is not None else (root.rank if lead.local_rank is None else None)
    node = lead.node or _node_of(att, rank)
    if rank is None and lead.local_rank is not None:
        rank = _global_rank(att, node, lead.local_rank)
    if node is None or rank is None:
        t_node, t_rank = _task_location(att)
        node = node or t_node
        rank = rank if rank is not None else t_rank
    others = sorted((f for f in causes if f is not lead and f.category == lead.category),
                    key=lambda f: (f.path, f.lineno))
    evidence = _dedup([_ev(lead)] + [_ev(f) for f in others])
    if root is not None:
        evidence.append(f"{root.path}:{root.lineno}: torchrun root cause: rank {root.rank} on {root.node}, "
                        f"exit code {root.exitcode}")
    said = _INNER_PREFIX.sub("", lead.text.split("]:", 1)[-1]).strip()   # torch's own prefix under --tee's
    summary = f"{catalogue.SUMMARIES[lead.category]}: {said[:160]}"
    if rank is None and lead.group_rank is not None:
        summary += f" ({rank_words(lead)})"
    return _verdict(lead.category, lead, evidence, node=node, rank=rank, summary=summary)


def _node_of(att: Attempt, rank: int | None) -> str | None:
    if rank is None:
        return None
    for rc in att.root_causes:
        if rc.rank == rank and rc.node:
            return rc.node
    return None


def _written_by(f: Finding, root: RootCause) -> bool:
    """The line is the failed worker's own: its rank, its local rank on its node (``[default1]:``),
    or a line without either in the agent's own log."""
    if f.rank is not None:
        return f.rank == root.rank
    if f.local_rank is not None and root.local_rank is not None:
        return f.local_rank == root.local_rank and (f.node is None or root.node is None or f.node == root.node)
    return f.path == root.path


def _nodes(att: Attempt) -> set[str]:
    return ({f.node for f in att.findings if f.node} | {rc.node for rc in att.root_causes if rc.node}
            | {t.node for t in att.task_exits})


def _global_rank(att: Attempt, node: str | None, local: int) -> int | None:
    """A local rank (``[default3]:``, ``local_rank: 3``) as a global one: torchrun's Root Cause
    entries give each node's first rank; a job whose logs name one node at most starts at 0."""
    for rc in att.root_causes:
        if rc.node == node and rc.rank is not None and rc.local_rank is not None:
            return rc.rank - rc.local_rank + local
    return local if len(_nodes(att)) <= 1 else None


def _task_location(att: Attempt) -> tuple[str | None, int | None]:
    """The node (and, where one task failed and no torchrun agent ran, the rank: one srun task
    per rank) of the task srun saw fail."""
    failed = [t for t in att.task_exits if t.code != 0]
    if not failed:
        return None, None
    first = failed[0]
    rank = int(first.tasks) if first.tasks.isdigit() and len(failed) == 1 and not _torchrun(att) else None
    return first.node, rank


#: the job script's reason for a setup step that ended the job (templates/job-setup.j2)
_SETUP_FAILED = re.compile(r"(?:node )?setup step \d+ failed \(exit \d+\)")


#: the job script's reason when its in-job preflight left too few good nodes (clusterkit choose-nodes)
_NODES_BAD = re.compile(r"(?:preflight: \d+ nodes failed|perf check: \d+ nodes below par), \d+ spares: .*")


def _fallback(att: Attempt, view: SlurmView | None) -> dict[str, Any]:
    if view is not None and view.reason and _NODES_BAD.fullmatch(view.reason):
        ev = [f"slurm: job state {view.state}, reason {view.reason}"] if view.state else [f"reason {view.reason}"]
        return _verdict("bad-nodes", None, ev, summary=view.reason.split(";")[0] + ": the job ended before training")
    if view is not None and view.reason and _SETUP_FAILED.fullmatch(view.reason):
        # no log line of a known failure: the job's own setup step ended it before the launcher
        ev = [f"slurm: job state {view.state}, reason {view.reason}"] if view.state else []
        return _verdict("user-code", None, ev, summary=f"{view.reason}: the job ended before any rank started "
                                                        "(the step's own output is in the batch log)")
    ev = [f"{t.path}:{t.lineno}: srun: task {t.tasks} on {t.node} exited with code {t.code}" for t in att.task_exits]
    ev += [_ev(w) for w in att.worker_exits]
    if view and view.state:
        ev.insert(0, f"{view.who}: job state {view.state}"
                  + (f", exit code {view.exit_code}" if view.exit_code is not None
                     else f", signal {view.signal}" if view.signal else ""))
    first = att.task_exits[0] if att.task_exits else None
    stopped = {f.node for f in att.findings if f.cascade == "srun-terminated" and f.node}
    node = first.node if first else (stopped.pop() if len(stopped) == 1 else None)
    rank = None
    if att.worker_exits:  # torchrun's or DeepSpeed's word on the worker that failed first
        w = min(att.worker_exits, key=_key)
        node = node or w.node
        rank = w.rank if w.rank is not None else (
            _global_rank(att, w.node, w.local_rank) if w.local_rank is not None else None)
    live = view is not None and view.state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED",
                                               "SUSPENDED", "RESIZING")
    summary = f"the job is {view.state}: no failure in its logs so far" if live and view else None
    if summary is None and not ev:
        summary = ("no failure found in these logs, and nothing in them shows that the job ended cleanly "
                   "(no completed state, no normal exit)")
    return _verdict("unknown", None, ev, node=node, rank=rank, summary=summary)


def _requeued(att: Attempt) -> dict[str, Any]:
    ev = [f"{t.path}:{t.lineno}: srun: task {t.tasks} on {t.node} exited with code {t.code}" for t in att.task_exits]
    return _verdict("unknown", None, ev, summary="this run left no failure in its logs, and Slurm started the job "
                                                 "again (requeued by scontrol, a node failure or preemption)")


def _clean(att: Attempt) -> bool:
    """Nothing failed in these logs: no failure line, no cascade symptom, no error exit."""
    return not (att.findings or att.root_causes or att.cascade or att.worker_exits
                or any(t.code for t in att.task_exits))


def judge(att: Attempt, view: SlurmView | None, *, completed: bool | None = None,
          superseded: bool = False) -> dict[str, Any]:
    """The verdict for one attempt.  ``completed``: Slurm says it succeeded; ``superseded``: a
    later restart of the job exists, so this run did not end the job whatever its logs say."""
    done = completed if completed is not None else (view is not None and view.state == "COMPLETED")
    if done:
        return _verdict("ok", None, [f"{view.who}: job state {view.state}"] if view and view.state else [])
    v = (_slurm_fact(att, view) or _first_failure(att) or _behind(att.findings)
         or (_requeued(att) if superseded else None)
         or _clean_end(att, view) or _fallback(att, view))
    if v["node"] is None and view and view.nodes and re.fullmatch(r"[\w.-]+", view.nodes) \
            and v["category"] not in _NO_NODE:
        v["node"] = view.nodes  # a one-node job: whatever failed, failed there
    _rank_on_node(att, v)
    return v


def _clean_end(att: Attempt, view: SlurmView | None) -> dict[str, Any] | None:
    """``ok`` from the logs alone needs positive evidence that the run ended cleanly: the job
    script's "launcher exited with status 0" (no failure line above it: those were judged first),
    or torch's warning at a process's normal end with nothing that failed.  Logs that only lack a
    known failure line are not evidence."""
    if view is not None:
        return None
    if att.success:  # the launcher's own status: the cascade under it was only the shutdown's noise
        return _verdict("ok", None, ["clusterkit: launcher exited with status 0"])
    if att.clean_exit and _clean(att):
        return _verdict("ok", None, ["torch: the processes printed their normal-exit warning "
                                     "(destroy_process_group), and nothing failed"],
                        summary="the processes ran to their normal end; no failure in these logs")
    return None


def _rank_on_node(att: Attempt, v: dict[str, Any]) -> None:
    """The rank named must have run on the node named: a rank the logs place on another node is
    dropped (the node stays: it is where the evidence was written)."""
    if v["rank"] is None or v["node"] is None:
        return
    where = {f.rank: f.node for f in att.findings if f.rank is not None and f.node}
    where.update({rc.rank: rc.node for rc in att.root_causes if rc.rank is not None and rc.node})
    placed = where.get(v["rank"])
    if placed is not None and placed != v["node"]:
        v["rank"] = None


def cascade_rows(att: Attempt) -> list[dict[str, Any]]:
    """The cascade under a verdict: how often each symptom showed, and on which ranks."""
    return [{"category": kind, "count": att.cascade[kind], "ranks": sorted(att.cascade_ranks.get(kind, set()))}
            for kind in catalogue.CASCADE_KINDS if att.cascade.get(kind)]
