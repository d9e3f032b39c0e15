"""The performance check's worker: one task per GPU (one per node with gloo), started by
``clusterkit preflight --perf`` as one srun step over the allocation.

``python -m clusterkit.preflight.perf_worker SPEC_JSON``.  Every task joins one
torch.distributed process group (NCCL on GPUs, gloo on CPUs; rendezvous on the step's first
node), then measures, in this order, every task at the same time:

1. compute: a fixed-size matrix multiply (``gemm_n`` square) on inputs every task draws from the
   same seed, in three timed blocks of at least ``gemm_iters`` multiplies and 0.25 s each: the
   throughput of the fastest block (interference only slows a block; a device held back is slow
   in all of them), and an exact checksum of the result (the
   float32/bfloat16 words summed as integers), which must be the same on every task;
2. within each node: all-reduce over the node's tasks (skipped with one task per node);
3. between nodes: ``rounds`` pairings of the nodes (round-robin, a node sits one round out when
   their number is odd), every pair of a round all-reducing at the same time in a group of its
   own, in ``PAIR_SWEEPS`` sweeps over all the rounds (each pair's figure once per sweep, so a
   pair's two figures are apart by a whole sweep), then the whole allocation.

Bus bandwidth is nccl-tests' busbw for all-reduce: ``bytes / time * 2 * (n - 1) / n`` for n
ranks, printed in Gbit/s, with ``time`` the median of the timed all-reduces (each waited for,
batches of ``iters`` until they span ``FIGURE_S``) after ``warmup`` untimed ones.  Each task
prints one JSON line per figure, prefixed by the marker the CLI passed, as soon as it has it: a
task that dies leaves the figures it had, and the CLI judges (:mod:`clusterkit.preflight.perf`).
Nothing here decides ok or slow.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

T_START = time.monotonic()
GEMM_BLOCKS = 3
GEMM_BLOCK_S = 0.25
#: an all-reduce figure's timed all-reduces span at least this long (and at most FIGURE_BATCHES x iters)
FIGURE_S = 0.25
FIGURE_BATCHES = 64
#: sweeps over the pairings: the judge keeps each pair's better sweep (perf._between), as the compute
#: figure keeps its best block; a link or NIC that is slow for good is slow in every sweep
PAIR_SWEEPS = 2


def emit(marker: str, **fields: Any) -> None:
    line = f"{marker} {json.dumps(fields, separators=(',', ':'))}\n"
    os.write(sys.stdout.fileno(), line.encode())


def pairings(n: int, rounds: int) -> list[list[tuple[int, int]]]:
    """``rounds`` round-robin pairings of nodes 0..n-1 (circle method): no pair repeats, every
    pair of a round is disjoint, a node sits out at most one of ``n - 1`` rounds when n is odd."""
    if n < 2:
        return []
    slots: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    m = len(slots)
    out: list[list[tuple[int, int]]] = []
    for r in range(min(rounds, m - 1)):
        rest = slots[1:]
        rest = rest[-r:] + rest[:-r] if r else rest
        arr = [slots[0], *rest]
        pairs = []
        for i in range(m // 2):
            a, b = arr[i], arr[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        out.append(sorted(pairs))
    return out


def boot_id() -> str:
    """This kernel's boot id: the same for every "node" that is a namespace or container of one machine."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii", errors="replace") as f:
            return f.read(64).strip() or "?"
    except OSError:
        return "?"


def gemm_turns(nodes: list[str], kernel_of: dict[str, str]) -> list[list[str]]:
    """Which nodes measure their compute together.  Nodes on kernels of their own all at once (one
    turn); nodes that share a kernel one of them per turn, so that no two measure on the same CPUs
    at once.  An unknown boot id ("?") is a kernel of its own."""
    by_kernel: dict[str, list[str]] = {}
    for i, h in enumerate(nodes):
        key = kernel_of.get(h, "?")
        by_kernel.setdefault(f"?{i}" if key == "?" else key, []).append(h)
    depth = max((len(g) for g in by_kernel.values()), default=0)
    return [[g[t] for g in by_kernel.values() if t < len(g)] for t in range(depth)]


def busbw_gbps(nbytes: int, seconds: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth, in Gbit/s."""
    if seconds <= 0 or ranks < 2:
        return 0.0
    return nbytes / seconds * 2 * (ranks - 1) / ranks * 8 / 1e9


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    marker = str(spec["marker"])
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    world = int(os.environ.get("SLURM_NTASKS", "1"))
    local = int(os.environ.get("SLURM_LOCALID", "0"))
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    emit(marker, ev="start", rank=rank, host=host)
    try:
        return _measure(spec, marker, rank, world, local, host)
    except Exception as exc:  # reported as this task's error; the CLI names the node
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        emit(marker, ev="error", rank=rank, host=host, error=last[:400])
        return 1


@dataclass
class _Layout:
    """Where every task is: the nodes in the step's order, each node's ranks, this task's groups."""

    host: str
    nodes: list[str]
    ranks_of: dict[str, list[int]]
    turns: list[list[str]]
    plan: list[list[tuple[int, int]]]
    intra: Any = None
    my_pairs: list[tuple[int, tuple[int, int], Any]] = field(default_factory=list)


def _device(torch: Any, spec: dict[str, Any], local: int) -> tuple[str, Any]:
    backend = str(spec["backend"])
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        device = torch.device("cuda", local % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)  # the same arithmetic on every node: comparable checksums
    return backend, device


def _layout(dist: Any, spec: dict[str, Any], world: int, host: str) -> _Layout:
    """Every task's node, in rank order; nodes in the order of the step's node list.  Every task
    makes every group, in the same order (torch.distributed's rule); a task keeps the ones it is
    in: its node's, and its pair of each round."""
    from clusterkit import hostlist

    seen: list[Any] = [None] * world
    dist.all_gather_object(seen, (host, boot_id()))
    where = [str(h) for h, _ in seen]
    kernel_of = {str(h): str(b) for h, b in seen}
    order = {h: i for i, h in enumerate(hostlist.expand(os.environ.get("SLURM_STEP_NODELIST") or ",".join(where)))}
    nodes = sorted(set(where), key=lambda h: (order.get(h, len(order)), h))
    ranks_of = {h: [r for r in range(world) if where[r] == h] for h in nodes}
    lay = _Layout(host, nodes, ranks_of, gemm_turns(nodes, kernel_of), pairings(len(nodes), int(spec["rounds"])))
    for h in nodes:
        if len(ranks_of[h]) > 1:
            group = dist.new_group(ranks_of[h])
            lay.intra = group if h == host else lay.intra
    me = nodes.index(host)
    for k, pairs in enumerate(lay.plan):
        for a_i, b_i in pairs:
            group = dist.new_group(sorted(ranks_of[nodes[a_i]] + ranks_of[nodes[b_i]]))
            if me in (a_i, b_i):
                lay.my_pairs.append((k, (a_i, b_i), group))
    return lay


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _gemm(torch: Any, dist: Any, spec: dict[str, Any], device: Any, lay: _Layout) -> dict[str, Any]:
    """The compute figure.  GEMM_BLOCKS timed blocks, each of at least gemm_iters multiplies and
    GEMM_BLOCK_S seconds; the fastest block's throughput is the figure.  Other work on the node
    (on a test cluster, the other "nodes" on the same cores) only ever slows a block, so the best
    one is what the device can do; a device held back for good (clocks, a CPU quota) is slow in
    every block.  A block spans more than two of the kernel's CPU-quota periods (CFS: 100 ms), so
    a quota cannot hide in the burst it allows at the start of each period.  Nodes that share one
    kernel (a test cluster of namespaces, pods on one machine) share its CPUs: measured at once
    they would measure each other, so they take turns (gemm_turns), one block each per turn: a
    node's blocks are spread over the whole measurement, and a burst of other work on the machine
    slows one of them, not all."""
    n = int(spec["gemm_n"] or (8192 if device.type == "cuda" else 1024))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    gen = torch.Generator(device="cpu").manual_seed(20240917)
    a = torch.rand(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.rand(n, n, generator=gen).to(device=device, dtype=dtype)
    c = a @ b  # warm-up
    _sync(torch, device)
    iters = int(spec["gemm_iters"])
    best = 0.0
    for _ in range(GEMM_BLOCKS):
        for turn in lay.turns:
            if lay.host in turn:
                count, t = 0, time.monotonic()
                while True:
                    c = a @ b
                    count += 1
                    if count >= iters:
                        _sync(torch, device)
                        secs = time.monotonic() - t
                        if secs >= GEMM_BLOCK_S:
                            break
                best = max(best, 2 * n**3 * count / secs / 1e12)
            if len(lay.turns) > 1:
                dist.barrier()
    words = c.contiguous().view(torch.int16 if dtype is torch.bfloat16 else torch.int32)
    checksum = int(words.to(torch.int64).sum().item())
    return {"n": n, "dtype": str(dtype).removeprefix("torch."), "tflops": round(best, 6), "checksum": f"{checksum:x}"}


def _allreduce(torch: Any, dist: Any, spec: dict[str, Any], device: Any, group: Any, nbytes: int,
               ranks: int) -> tuple[float, float]:
    """The median of the timed all-reduces after ``warmup`` untimed ones, and its busbw: batches
    of ``iters`` until they span FIGURE_S (at most FIGURE_BATCHES batches).  A figure of a few
    all-reduces of a few milliseconds each is decided by whichever moment of other work on the
    node it falls in; over a quarter of a second the median is the link's.  Whether to go on is
    the group's answer (an all-reduce outside the timing), so every rank runs as many."""
    buf = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
    for _ in range(int(spec["warmup"])):
        dist.all_reduce(buf, group=group)
    _sync(torch, device)
    dist.barrier(group=group)
    times: list[float] = []
    more = torch.zeros(1, dtype=torch.int32, device=device)
    t_series = time.monotonic()
    for _ in range(FIGURE_BATCHES):
        for _ in range(int(spec["iters"])):
            t = time.monotonic()
            dist.all_reduce(buf, group=group)
            _sync(torch, device)
            times.append(time.monotonic() - t)
        more.fill_(int(time.monotonic() - t_series < FIGURE_S))
        dist.all_reduce(more, group=group)   # the sum: any rank short of FIGURE_S and all go on
        if int(more.item()) == 0:
            break
    secs = statistics.median(times)  # preempted iterations, fewer than half, do not make a link slow
    return secs, busbw_gbps(buf.numel() * 4, secs, ranks)


def _between(torch: Any, dist: Any, spec: dict[str, Any], device: Any, lay: _Layout, marker: str, rank: int,
             world: int) -> None:
    """The pairings (a node without a pair in a round waits), ``PAIR_SWEEPS`` times over, then
    everyone.  On nodes that share a kernel, the pairs of a round go one after another (see
    :func:`_gemm`).  A pair's figure is the median of a few hundred milliseconds of all-reduces:
    a burst of other work on a node (or, on a test cluster, on the machine) can hold down every
    pairing that node has in one sweep, and a sweep later that burst is over."""
    nodes, host = lay.nodes, lay.host
    for sweep in range(1, PAIR_SWEEPS + 1):
        for k in range(len(lay.plan)):
            slots = [[pair] for pair in lay.plan[k]] if len(lay.turns) > 1 else [lay.plan[k]]
            for slot in slots:
                for _, (a_i, b_i), group in (p for p in lay.my_pairs if p[0] == k and p[1] in slot):
                    size = len(lay.ranks_of[nodes[a_i]]) + len(lay.ranks_of[nodes[b_i]])
                    secs, gbps = _allreduce(torch, dist, spec, device, group, int(spec["inter_bytes"]), size)
                    emit(marker, ev="pair", rank=rank, host=host, round=k + 1, sweep=sweep,
                         pair=[nodes[a_i], nodes[b_i]], seconds=round(secs, 6), gbps=round(gbps, 4))
                dist.barrier()
    if len(nodes) > 1:
        secs, gbps = _allreduce(torch, dist, spec, device, None, int(spec["inter_bytes"]), world)
        emit(marker, ev="world", rank=rank, host=host, seconds=round(secs, 6), gbps=round(gbps, 4))


def _measure(spec: dict[str, Any], marker: str, rank: int, world: int, local: int, host: str) -> int:
    import torch
    import torch.distributed as dist

    from clusterkit import hostlist

    t_import = time.monotonic() - T_START
    backend, device = _device(torch, spec, local)
    first = hostlist.expand(os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST") or host)[0]
    t0 = time.monotonic()
    dist.init_process_group(backend, init_method=f"tcp://{first}:{int(spec['port'])}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=float(spec["timeout_s"])))
    lay = _layout(dist, spec, world, host)
    dist.barrier()
    emit(marker, ev="init", rank=rank, host=host, backend=backend, device=str(device), import_s=round(t_import, 3),
         init_s=round(time.monotonic() - t0, 3), nodes=lay.nodes, shared_kernel=len(lay.turns) > 1)
    t_measure = time.monotonic()
    # 1. compute
    emit(marker, ev="gemm", rank=rank, host=host, local=local, **_gemm(torch, dist, spec, device, lay))
    # 2. within the node
    if lay.intra is not None:
        secs, gbps = _allreduce(torch, dist, spec, device, lay.intra, int(spec["intra_bytes"]),
                                len(lay.ranks_of[host]))
        emit(marker, ev="intra", rank=rank, host=host, seconds=round(secs, 6), gbps=round(gbps, 4))
    dist.barrier()
    # 3. between nodes
    _between(torch, dist, spec, device, lay, marker, rank, world)
    dist.barrier()
    emit(marker, ev="done", rank=rank, host=host, measure_s=round(time.monotonic() - t_measure, 3))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
