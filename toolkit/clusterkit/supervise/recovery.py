"""Recovery inside the allocation, at work: after a launch step that failed while the run was not
stopping, doctor judges that attempt's logs alone, Slurm says which of the allocation's nodes are
down or failing, :func:`clusterkit.supervise.replan.next_step` decides, and this module carries
it out: the launch rebuilt for the new node list, the hostfile rewritten, the attempt recorded
(:mod:`clusterkit.supervise.attempts`), or the requeue without the bad nodes (docs/architecture.md
§3, "Recovery inside the allocation").
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from clusterkit import jobfiles
from clusterkit.hostlist import HostlistError, expand, fold, is_host
from clusterkit.safefile import is_real_dir, read_capped, write_atomic
from clusterkit.supervise import attempts, frback, head, hostorder, replan
from clusterkit.supervise import judge as doctor_run
from clusterkit.tooltext import decode

DOCTOR_TIMEOUT_S = 120.0
DOCTOR_MAX_OUT = 4 << 20
Log = Callable[[str], None]
Client = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass
class Run:
    """This run's attempts in its allocation."""

    job_id: str
    run_dir: str
    restart: int
    allocation: tuple[str, ...]
    nodes: tuple[str, ...]
    unused: tuple[str, ...]
    max_relaunches: int
    attempt: int = 0
    unknown_used: bool = False
    done: list[attempts.Attempt] = field(default_factory=list)
    by_switch: bool = False       # the job script ordered the hosts by switch (CK_TOPOLOGY)
    switch_of: tuple[tuple[str, str], ...] | None = None   # read once, at the first failure


def start(env: Mapping[str, str], job_id: str, run_dir: str, restart: int, max_relaunches: int,
          log: Log) -> Run | None:
    """This run's first attempt from the job script's environment (the allocation, the nodes
    launched on); None, said once, when they cannot be read."""
    try:
        allocation = tuple(expand(env.get("SLURM_JOB_NODELIST", "")))
        nodes = tuple(h for h in env.get("CK_NODELIST", "").split(",") if h)
        unused = [h for h in allocation if h not in nodes]
        dropped_at_start = _dropped_at_start(run_dir, job_id, restart)
    except HostlistError:
        allocation, nodes, unused, dropped_at_start = (), (), [], set()
    if not nodes or not set(nodes) <= set(allocation):
        log("recovery off: the nodes launched on (CK_NODELIST) are not a part of the allocation")
        return None
    return Run(job_id, run_dir, restart, allocation, nodes, tuple(h for h in unused if h not in dropped_at_start),
               max_relaunches, by_switch=env.get("CK_TOPOLOGY") in ("tree", "block"))


def switches(client: Client, run: Run) -> tuple[tuple[str, str], ...]:
    """The allocation's nodes' leaf switches or blocks (``scontrol show topology``, asked once a
    run) when the job orders its hosts by switch; none otherwise or when Slurm gives none."""
    if not run.by_switch:
        return ()
    if run.switch_of is None:
        group_of, _ = hostorder.groups(lambda argv, timeout_s: client(argv, timeout_s=timeout_s, ignore_term=True))
        run.switch_of = tuple((h, group_of[h]) for h in run.allocation if h in group_of)
    return run.switch_of


def _dropped_at_start(run_dir: str, job_id: str, restart: int) -> set[str]:
    """The nodes the in-job preflight dropped at this run's start (never taken as spares): the
    names in ``logs/nodes-<job>.r<restart>.json``'s ``dropped``, read as data."""
    path = jobfiles.NODE_CHOICE.path(run_dir, job_id, restart)
    try:
        raw, more = read_capped(path, 4 << 20, follow_symlinks=False)
    except OSError:
        return set()
    return set() if more else set(re.findall(r'"host": "([A-Za-z0-9._-]{1,200})"', decode(raw)))


def attempt_logs(run_dir: str, job_id: str, restart: int, attempt: int) -> list[str]:
    """The rank logs of one attempt: ``<job>.r<restart>.<who>.out`` for the first,
    ``<job>.r<restart>.a<attempt>.<who>.out`` after it."""
    logs = jobfiles.logs(run_dir)
    if not is_real_dir(logs):
        return []
    pattern = jobfiles.rank_logs(job_id, restart, attempt)
    try:
        return sorted(str(p) for p in logs.iterdir() if pattern.fullmatch(p.name))[:10_000]
    except OSError:
        return []


def judge_launch(run: Run, launch: tuple[str, ...], log: Log) -> replan.Verdict | None:
    """:func:`judge`, with the node of the rank the verdict names where each rank is a Slurm task
    (srun's placement wins over a host name read in the log's text)."""
    v = judge(run, log)
    placed = replan.node_of_rank(launch, run.nodes, v.rank) if v is not None and v.rank is not None else None
    return replace(v, node=placed) if v is not None and placed is not None else v


def judge(run: Run, log: Log) -> replan.Verdict | None:
    """doctor's verdict on this attempt's logs alone (bounded in time and output); None, said,
    when no ``clusterkit`` is on PATH to ask or the attempt left no rank log to read."""
    files = attempt_logs(run.run_dir, run.job_id, run.restart, run.attempt)
    if shutil.which("clusterkit") is None or not files:
        log("recovery: " + ("clusterkit is not on PATH on the batch host, so doctor cannot judge the failure"
                            if files else f"attempt {run.attempt} left no rank log for doctor to judge"))
        return None
    text, late = doctor_run.doctor_on(files, DOCTOR_TIMEOUT_S, DOCTOR_MAX_OUT)
    if late:
        return replan.Verdict("unknown", f"doctor did not answer within {DOCTOR_TIMEOUT_S:.0f} s")
    return None if text is None else replan.verdict_from_doctor(text)


def copy_dumps(run: Run, v: replan.Verdict | None, log: Log) -> None:
    """The flight-recorder dump of the rank the verdict names and ``--debug``'s NCCL files of its node,
    copied from that node into the run's logs where the job keeps them node-local
    (:mod:`clusterkit.supervise.frback`)."""
    if v is not None:
        node = v.node if v.node is not None and is_host(v.node) else None
        frback.copy_named([(v.rank, node)] if v.rank is not None else [], [node] if node else [],
                          run.run_dir, run.job_id, run.restart, log)


def down_nodes(client: Client, run: Run) -> list[str]:
    """The allocation's nodes that Slurm reports down, draining, failing or not responding."""
    answer = client(["sinfo", "-h", "-N", "-n", fold(run.allocation), "-o", "%N %t"], ignore_term=True)
    return replan.failing_nodes(answer.stdout, run.allocation) if answer.returncode == 0 else []


_EXC = re.compile(r" ExcNodeList=(\S+)")
_PARTITION = re.compile(r" Partition=([A-Za-z0-9_.-]{1,100}) ")


def partition_nodes(client: Client, show_job: str) -> tuple[str, ...]:
    """The nodes of the job's partition (``sinfo -h -N -p PART -o %N``); none when unknown."""
    m = _PARTITION.search(show_job[:65536])
    if m is None:
        return ()
    answer = client(["sinfo", "-h", "-N", "-p", m.group(1), "-o", "%N"], ignore_term=True)
    if answer.returncode != 0:
        return ()
    names = answer.stdout[:1 << 20].split()[:100_000]
    return tuple(dict.fromkeys(h for h in names if is_host(h)))



def excluded(show_job: str) -> tuple[str, ...]:
    """The job's ExcNodeList (``scontrol -o show job``), expanded; none when it has none."""
    return replan.job_nodes(show_job, _EXC)


def kept_out(show_job: str, run: Run) -> tuple[str, ...]:
    """The nodes a requeue keeps out besides this attempt's: the job's ExcNodeList and every node
    an earlier attempt of this run dropped."""
    return tuple(dict.fromkeys([*excluded(show_job), *(h for a in run.done for h, _ in a.dropped)]))


def record(run: Run, status: int, v: replan.Verdict, step: replan.Step) -> None:
    then = "relaunch" if isinstance(step, replan.Relaunch) else "requeue" if isinstance(step, replan.RequeueWithout) \
        else "stop"
    verdict = f"{v.category}: {v.summary}" if v.summary else v.category
    run.done.append(attempts.Attempt(run.attempt, run.nodes, min(max(status, 0), 255), verdict, step.dropped, then,
                                     round(time.time(), 3)))
    attempts.write(run.run_dir, run.job_id, run.restart, run.done)


def relaunch(run: Run, step: replan.Relaunch, launch: tuple[str, ...], env: dict[str, str],
             log: Log) -> tuple[str, ...] | None:
    """The next attempt's launch argv, with the environment (``env``, this process's, which the
    launch inherits) and the hostfile set for ``step.nodes``; None when the argv cannot be rebuilt."""
    argv = replan.relaunch_argv(launch, step.nodes, run.attempt + 1, overlap=step.overlap)
    if argv is None:
        log("recovery: the launch names no --nodelist= to rebuild; not relaunching")
        return None
    rdzv = head.rendezvous_host(step.nodes[0], env, log)   # the site's network.rendezvous_host, if any
    if rdzv is None:
        return None
    hostfile = env.get("CK_HOSTFILE", "")
    if hostfile and os.path.isfile(hostfile) and not os.path.islink(hostfile):
        try:
            text = decode(read_capped(hostfile, 16 << 20, follow_symlinks=False)[0])
            write_atomic(Path(hostfile), replan.hostfile_for(text, run.nodes, step.nodes).encode())
        except OSError as exc:
            log(f"recovery: cannot rewrite the hostfile {hostfile}: {exc.strerror or exc}; not relaunching")
            return None
    env["CK_NODELIST"] = ",".join(step.nodes)
    env["CK_HEAD"] = env["MASTER_ADDR"] = rdzv
    if "CK_HEAD_NODE" in env:
        env["CK_HEAD_NODE"] = step.nodes[0]
    dropped = {h for h, _ in step.dropped}
    run.unused = tuple(h for h in run.unused if h not in step.nodes and h not in dropped)
    run.nodes = step.nodes
    run.attempt += 1
    return argv
