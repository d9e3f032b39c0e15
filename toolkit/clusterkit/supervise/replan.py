"""Recovery inside the allocation: a failed attempt's verdict in, the next step out.  Pure: no
process, no clock, no environment (docs/architecture.md §3, "Recovery inside the allocation").

The supervisor (:mod:`clusterkit.supervise.recovery`) gathers the facts: doctor's verdict on
the attempt's own logs, the allocation's nodes that Slurm reports down or failing, the nodes the
attempt ran on, the allocation's unused good nodes and the budgets.  :func:`next_step` says
whether to relaunch on other nodes (same world size), to requeue without the bad nodes (no
spare left), or to stop with the verdict.  :func:`relaunch_argv` and :func:`hostfile_for` rebuild
the launch for the new node list, as the job script built the first one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusterkit import jobfiles, topology
from clusterkit.hostlist import HostlistError, check_host, expand
from clusterkit.tooltext import load_json, printable

#: a node's fault (or one a relaunch on other nodes may fix): drop the nodes named, relaunch
RELAUNCH = ("gpu-hardware", "nccl-network", "slurm-node-failure", "rendezvous", "nccl-timeout", "bad-nodes",
            "stall",   # the supervisor's own: no progress (supervise/stall.py); the node behind, where named
            "straggler")   # the supervisor's own: a straggler replaced at a checkpoint (supervise/straggle.py)
#: a failure of the run itself: it stops with the verdict, never retried
STOP = ("user-code", "launcher-config", "import-env", "gpu-oom", "host-oom")
# Any other verdict (unknown, ok, a Slurm end the run did not hear of) with no node down is
# relaunched once per run, then the run stops.
#: sinfo's short states (``%t``) of a node that is not fit to run on
_BAD_STATES = ("down", "drain", "drng", "fail", "failg", "maint", "unk", "boot", "powered_down", "pow_dn")
_WHY_MAX = 300
_REQ = re.compile(r" ReqNodeList=(\S+)")


def job_nodes(show_job: str, field: re.Pattern[str]) -> tuple[str, ...]:
    """The host list of one field of ``scontrol -o show job`` (``field``'s group 1), expanded;
    none when the field is absent, ``(null)`` or not a host list."""
    m = field.search(show_job[:65536])
    if m is None or m.group(1) in ("(null)", ""):
        return ()
    try:
        return tuple(expand(m.group(1)))
    except HostlistError:
        return ()


def requested(show_job: str) -> tuple[str, ...]:
    """The nodes the job asks for by name (``scontrol -o show job``'s ReqNodeList), expanded."""
    return job_nodes(show_job, _REQ)


@dataclass(frozen=True)
class Verdict:
    """doctor's answer on one attempt's logs (bounded, printable)."""

    category: str
    summary: str = ""
    node: str | None = None
    rank: int | None = None


@dataclass(frozen=True)
class Relaunch:
    """Launch again in this allocation on ``nodes`` (same count), without ``dropped`` (host, why)."""

    nodes: tuple[str, ...]
    dropped: tuple[tuple[str, str], ...]
    line: str
    once: bool = False     # the relaunch a failure without a node to blame gets once per run
    # a node down: Slurm (22.05) never ends the old step's part on a node that died, and that step
    # keeps its CPUs, memory and GRES on the other nodes too, so the new step must overlap it
    overlap: bool = False


@dataclass(frozen=True)
class RequeueWithout:
    """No spare left (or the relaunch budget spent): requeue the job with ``exclude`` kept out."""

    dropped: tuple[tuple[str, str], ...]
    exclude: tuple[str, ...]
    line: str


@dataclass(frozen=True)
class Stop:
    """The end for good: a failure no relaunch can fix, or no way on."""

    reason: str
    dropped: tuple[tuple[str, str], ...] = ()


Step = Relaunch | RequeueWithout | Stop


@dataclass(frozen=True)
class Attempted:
    """What the failed attempt was: its nodes, the allocation's unused good nodes, the budgets."""

    attempt: int                      # 0 for the first launch of this run
    nodes: tuple[str, ...]            # the nodes it ran on
    unused: tuple[str, ...]           # good nodes of the allocation not launched on (spares), in order
    max_relaunches: int
    unknown_used: bool = False        # an `unknown` verdict was relaunched already in this run
    restarts_left: int = 0            # requeues left in the job's restart budget
    excluded: tuple[str, ...] = ()    # nodes already kept out of the job (its ExcNodeList, earlier drops)
    pinned: tuple[str, ...] = ()      # nodes the job asks for by name (its ReqNodeList: --nodelist)
    partition: tuple[str, ...] = ()   # the nodes of the job's partition (none: not known)
    # the allocation in Slurm's order (SLURM_JOB_NODELIST): a step numbers its nodes so, whatever
    # --nodelist's order, and its node 0 (SLURM_NODEID, and SLURM_PROCID 0) must be the head
    allocation: tuple[str, ...] = ()
    # each node's leaf switch or block (network.topology; none: not placed by topology): a spare
    # under the dropped node's switch first, the relaunch's nodes ordered by switch as at the start
    switch_of: tuple[tuple[str, str], ...] = ()


def verdict_from_doctor(out: str) -> Verdict:
    """doctor's ``--logs --json`` answer, read as data: the verdict's category, summary and node,
    each checked; anything else is an ``unknown`` verdict."""
    try:
        report = load_json(out[:4 << 20])
        v = report["verdict"]
        category = v["category"]
    except (ValueError, KeyError, TypeError):
        return Verdict("unknown", "doctor gave no verdict")
    if not isinstance(category, str) or not re.fullmatch(r"[a-z][a-z-]{0,39}", category):
        return Verdict("unknown", "doctor gave no verdict")
    summary = v.get("summary") if isinstance(v, dict) else ""
    node = v.get("node") if isinstance(v, dict) else None
    try:
        node = check_host(node) if isinstance(node, str) else None
    except HostlistError:
        node = None
    rank = v.get("rank") if isinstance(v, dict) else None
    rank = rank if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < 10_000_000 else None
    return Verdict(category, printable(summary if isinstance(summary, str) else "")[:_WHY_MAX], node, rank)


def node_of_rank(argv: tuple[str, ...], nodes: tuple[str, ...], rank: int) -> str | None:
    """The node a rank ran on when each rank is a Slurm task with a log of its own (``rank%t``):
    srun's block distribution puts tasks ``--ntasks-per-node`` at a time on the nodes in order.
    Slurm's placement, not what the log's text claims (a shell prompt pasted in a log names a host)."""
    cut = argv.index(MARK) if MARK in argv else len(argv)
    per = [w.split("=", 1)[1] for w in argv[:cut] if w.startswith("--ntasks-per-node=")]
    by_rank = any(w.startswith("--output=") and ".rank%t." in w for w in argv[:cut])   # a Slurm task per rank
    if not by_rank or not per or not per[-1].isdigit() or int(per[-1]) < 1 or any(w.startswith(("--distribution", "-m"))
                                                                   for w in argv[:cut]):
        return None
    index = rank // int(per[-1])
    return nodes[index] if index < len(nodes) else None


def failing_nodes(sinfo_out: str, allocation: tuple[str, ...]) -> list[str]:
    """The nodes of ``allocation`` that ``sinfo -h -N -o '%N %t'`` reports down, draining,
    failing or not responding (a state ending in ``*``), in allocation order."""
    bad: set[str] = set()
    for line in sinfo_out[:1 << 20].splitlines()[:100_000]:
        parts = line.split()
        if len(parts) != 2:
            continue
        host, state = parts
        base = state.rstrip("*~#!%$@^-+").lower()
        if state.endswith("*") or base in _BAD_STATES:
            bad.add(host)
    return [h for h in allocation if h in bad]


def left_allocation(show_job: str, allocation: tuple[str, ...]) -> list[str] | None:
    """The nodes of ``allocation`` that Slurm took out of the job (``scontrol -o show job``'s
    NodeList: a node that failed under --no-kill leaves it), in order; None when it lists none."""
    m = re.search(r" NodeList=(\S+)", show_job[:65536])
    if m is None or m.group(1) in ("(null)", ""):
        return None
    try:
        still = set(expand(m.group(1)))
    except HostlistError:
        return None
    return [h for h in allocation if h not in still]


def with_slurm_facts(v: Verdict, down: list[str]) -> Verdict:
    """doctor's verdict on the ranks' logs, with what Slurm knows: when the logs blame nothing
    (``unknown``, ``ok``, a Slurm end) while Slurm reports nodes of the allocation down or failing,
    the attempt's cause is those nodes' failure (``slurm-node-failure``), doctor's answer kept beside."""
    if not down or v.category in RELAUNCH or v.category in STOP:
        return v
    said = f"Slurm reports {', '.join(down[:8])}{' ...' if len(down) > 8 else ''} down or failing"
    return Verdict("slurm-node-failure", f"{said} (doctor on the ranks' logs: {_why(v)})"[:_WHY_MAX])


def _why(v: Verdict) -> str:
    return f"{v.category}: {v.summary}" if v.summary else v.category


def next_step(v: Verdict, down: list[str], a: Attempted) -> Step:
    """What follows a failed attempt (the run not stopping: no TERM, no warning, no preemption)."""
    if v.category in STOP:
        return Stop(f"doctor: {_why(v)}: a relaunch cannot fix it, not retried")
    once = v.category not in RELAUNCH and not down   # no verdict that blames a node: relaunched once
    if once and a.unknown_used:
        return Stop(f"doctor: {_why(v)}: the second failure without a node to blame in this run, not retried")
    dropped: list[tuple[str, str]] = []
    if v.node in a.nodes and v.category in RELAUNCH:   # no verdict blames no node
        dropped.append((v.node, f"attempt {a.attempt}: doctor: {_why(v)}"[:_WHY_MAX]))
    for host in down:
        if host not in {h for h, _ in dropped}:
            dropped.append((host, f"attempt {a.attempt}: Slurm reports it down or failing"))
    gone = {h for h, _ in dropped}
    spares = [h for h in a.unused if h not in gone]
    keep = [h for h in a.nodes if h not in gone]
    need = len(a.nodes) - len(keep)
    short_why = {v.node: v.category}   # the log line names each node's cause briefly; the record in full
    named = ", ".join(f"{h} ({short_why.get(h, 'down in Slurm')})" for h, _ in dropped) or "no node named"
    if a.attempt + 1 <= a.max_relaunches and need <= len(spares):
        group_of = dict(a.switch_of)
        chosen = topology.pick_spares([h for h in a.nodes if h in gone], spares, group_of)
        fresh = iter(chosen)   # each spare takes a dropped node's place in the list
        nodes = tuple(next(fresh) if h in gone else h for h in a.nodes)
        if set(nodes) <= set(a.allocation):   # then in Slurm's order: the head is the step's node 0
            nodes = tuple(h for h in a.allocation if h in set(nodes))
            if group_of:   # by switch, as the job script ordered them (its first host still first)
                nodes = tuple(topology.order_hosts(nodes, group_of))
        taken = f"; spare(s) {', '.join(chosen)} take their place" if need else "; on the same nodes"
        return Relaunch(nodes, tuple(dropped),
                        f"attempt {a.attempt} failed ({_why(v)}): dropped {named}{taken}: relaunching "
                        f"(relaunch {a.attempt + 1} of {a.max_relaunches})", once=once, overlap=bool(down))
    short = (f"the budget of {a.max_relaunches} relaunches is spent" if a.attempt + 1 > a.max_relaunches
             else f"{need} node(s) to replace and {len(spares)} spare(s) left")
    if not dropped:
        return Stop(f"doctor: {_why(v)}: {short}, and no node to blame for a requeue", ())
    exclude = tuple(dict.fromkeys([*a.excluded, *gone]))
    if gone & set(a.pinned):
        return Stop(f"doctor: {_why(v)}: dropped {named}; {short}, and the job asks for "
                    f"{', '.join(sorted(gone & set(a.pinned)))} by name: a requeue without them could never start",
                    tuple(dropped))
    left = [h for h in a.partition if h not in exclude]
    # the requeued job asks for its whole allocation again, the spares an attempt used up and the
    # nodes the start dropped included (its #SBATCH --nodes), not only the nodes still at hand
    asks = max(len(set(a.allocation)), len(a.nodes) + len(a.unused))
    if a.partition and len(left) < asks:
        return Stop(f"doctor: {_why(v)}: dropped {named}; {short}, and without the nodes kept out {len(left)} of "
                    f"the partition's {len(a.partition)} nodes remain for {asks}: "
                    "a requeue could never start", tuple(dropped))
    if a.restarts_left <= 0:
        return Stop(f"doctor: {_why(v)}: dropped {named}; {short} and the restart budget is spent", tuple(dropped))
    return RequeueWithout(tuple(dropped), exclude,
                          f"attempt {a.attempt} failed ({_why(v)}): dropped {named}; {short}: requeueing without them")


_OUTPUT_ATTEMPT = jobfiles.ATTEMPT_TAG
MARK = "clusterkit-launch"


def relaunch_argv(argv: tuple[str, ...], nodes: tuple[str, ...], attempt: int,
                  overlap: bool = False) -> tuple[str, ...] | None:
    """The launch argv for ``nodes`` and attempt ``attempt``: srun's ``--nodelist`` names the new
    nodes and its ``--output`` carries ``a<attempt>.`` after the restart (``<job>.r0.a1.node3.out``)
    so each attempt's logs stay apart; ``overlap``: srun's ``--overlap`` after ``--nodelist``
    (:attr:`Relaunch.overlap`).  Only clusterkit's own words (before the ``clusterkit-launch``
    mark) are touched; None when the argv has no ``--nodelist=`` there (not a launch it can rebuild)."""
    cut = argv.index(MARK) if MARK in argv else len(argv)
    out = list(argv)
    found = -1
    for i, word in enumerate(argv[:cut]):
        if word.startswith("--nodelist=") and found < 0:
            out[i], found = "--nodelist=" + ",".join(nodes), i
        elif word.startswith("--output=") and attempt > 0:
            out[i] = _OUTPUT_ATTEMPT.sub(lambda m: f"{m.group(1)}{jobfiles.ATTEMPT}{attempt}.", word, count=1)
    if found >= 0 and overlap and "--overlap" not in argv[:cut]:
        out.insert(found + 1, "--overlap")
    return tuple(out) if found >= 0 else None


def hostfile_for(text: str, old: tuple[str, ...], new: tuple[str, ...]) -> str:
    """The hostfile rewritten for ``new`` nodes: each line's first word that names one of the
    ``old`` nodes names the node in its place (same position in the list); the rest of the line
    (slots, the dialect's syntax) kept."""
    swap = dict(zip(old, new, strict=False))
    lines = []
    for line in text.splitlines():
        m = re.match(r"([A-Za-z0-9._-]+)(.*)", line)
        if m and m.group(1) in swap:
            line = swap[m.group(1)] + m.group(2)
        lines.append(line)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")
