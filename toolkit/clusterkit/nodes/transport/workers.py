"""Fan-out across worker processes, for runs too large for one interpreter.

A paramiko handshake is mostly Python holding the GIL, so one process tops out at one core.
A large run is split over worker processes (forked: they inherit the runner, its parsed SSH
config and known_hosts index), each with its own thread fan-out.  Every result is sent back
as it finishes and handed to ``on_result`` in the calling process, so a progress bar and the
report see one run.  Small runs, and calls from any thread but the main one (Ctrl-C is the
main thread's; a library caller's threads may hold locks a fork would copy mid-use), stay
in-process.  A worker touches nothing of the caller's but the runner and its pipe, so other
threads of the CLI (the progress bar's refresh) do not matter to it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from .base import ErrorKind, NodeOutput, ResultCallback, RunResults, _unique

MIN_HOSTS = 64          # below this a run stays in-process: no start-up cost
MIN_HOSTS_PER_WORKER = 32
MIN_THREADS_PER_WORKER = 8

# (hosts, on_result) -> results: one worker's share, run with its own thread fan-out
Chunk = Callable[[Sequence[str], ResultCallback], RunResults]


def cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_count(hosts: int, fanout: int, ncores: int | None = None) -> int:
    """How many worker processes a run of ``hosts`` nodes gets (1: stay in-process).

    At most one per core, each with at least :data:`MIN_HOSTS_PER_WORKER` hosts and
    :data:`MIN_THREADS_PER_WORKER` of the ``fanout`` threads (their sum never exceeds it)."""
    if (hosts < MIN_HOSTS or threading.current_thread() is not threading.main_thread()
            or "fork" not in multiprocessing.get_all_start_methods()):
        return 1
    ncores = cores() if ncores is None else ncores
    return max(1, min(ncores, hosts // MIN_HOSTS_PER_WORKER, fanout // MIN_THREADS_PER_WORKER))


def fan_out_processes(hosts: Sequence[str], chunk: Chunk, *, workers: int, stall_s: float,
                      on_result: ResultCallback | None = None) -> RunResults:
    """Run ``chunk`` over ``workers`` forked processes, each on every ``workers``-th host.

    Results stream back as they finish; ``on_result`` is called for each, from this thread.
    A worker that sends nothing for ``stall_s`` (longer than any one node may take) is
    killed and its unfinished nodes reported as TIMEOUT.
    Ctrl-C here is passed on to the workers (SIGINT), which stop as :func:`fan_out` does;
    nodes that had not finished are reported ``INTERRUPTED``.
    """
    hosts = _unique(hosts)
    t0 = time.monotonic()
    ctx = multiprocessing.get_context("fork")
    for stream in (sys.stdout, sys.stderr):  # else a child may flush our buffered text again
        with contextlib.suppress(Exception):
            stream.flush()
    procs: list[tuple[Any, Connection, list[str]]] = []
    results: dict[str, NodeOutput] = {}
    interrupted = False
    try:
        for i in range(workers):
            share = hosts[i::workers]
            ours, theirs = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_worker, args=(chunk, share, theirs), daemon=True,
                               name=f"clusterkit-runner-proc-{i}")
            proc.start()
            theirs.close()
            procs.append((proc, ours, share))
        interrupted = _collect(procs, results, on_result, stall_s)
    except KeyboardInterrupt:
        interrupted = True
        _interrupt(procs)
    finally:
        _reap(procs)
    for host in hosts:
        if host not in results:
            results[host] = NodeOutput(host, error=ErrorKind.INTERRUPTED,
                                       reason="interrupted before this node finished")
    return RunResults(((h, results[h]) for h in hosts), interrupted=interrupted,
                      wall_s=time.monotonic() - t0)


def _worker(chunk: Chunk, share: Sequence[str], conn: Connection) -> None:
    """A worker's body: run its share, send each result as it comes, then how it ended."""
    try:
        res = chunk(share, lambda r: conn.send(("result", r)))
        conn.send(("end", res.interrupted))
    except KeyboardInterrupt:  # before or after the fan-out's own handling
        with contextlib.suppress(Exception):
            conn.send(("end", True))
    except BaseException:  # a bug: the parent raises it
        with contextlib.suppress(Exception):
            conn.send(("bug", traceback.format_exc()))
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def _collect(procs: list[tuple[Any, Connection, list[str]]], results: dict[str, NodeOutput],
             on_result: ResultCallback | None, stall_s: float) -> bool:
    """Gather every worker's results until each has ended; True if any was interrupted."""
    live = {conn: (proc, share) for proc, conn, share in procs}
    heard = {conn: time.monotonic() for conn in live}
    interrupted = False
    while live:
        now = time.monotonic()
        for stalled in [c for c in live if now - heard[c] > stall_s]:
            proc, share = live.pop(stalled)
            proc.kill()
            proc.join(1)
            _orphans(share, results, on_result, ErrorKind.TIMEOUT,
                     f"no result within {stall_s:.0f} s; abandoned")
        for ready in wait(list(live), timeout=0.5):
            assert isinstance(ready, Connection)
            conn = ready
            heard[conn] = time.monotonic()
            try:
                kind, payload = conn.recv()
            except (EOFError, OSError):  # gone without saying how it ended
                proc, share = live.pop(conn)
                proc.join(1)
                _orphans(share, results, on_result, ErrorKind.LAUNCH,
                         f"the worker process checking this node exited unexpectedly "
                         f"(exit status {proc.exitcode})")
                continue
            if kind == "result":
                if payload.host not in results:
                    results[payload.host] = payload
                    if on_result is not None:
                        on_result(payload)
            elif kind == "end":
                interrupted |= bool(payload)
                live.pop(conn)
            else:
                raise RuntimeError(f"preflight worker process failed:\n{payload}")
    return interrupted


def _orphans(share: Sequence[str], results: dict[str, NodeOutput], on_result: ResultCallback | None,
             kind: ErrorKind, reason: str) -> None:
    """The unfinished nodes of a worker that died (killed for memory, say) or stalled."""
    for host in share:
        if host not in results:
            res = NodeOutput(host, error=kind, reason=reason)
            results[host] = res
            if on_result is not None:
                on_result(res)


def _interrupt(procs: list[tuple[Any, Connection, list[str]]]) -> None:
    """Pass Ctrl-C on (a terminal's Ctrl-C has reached them too; a `kill -INT` has not)."""
    for proc, _, _ in procs:
        if proc.is_alive() and proc.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGINT)


def _reap(procs: list[tuple[Any, Connection, list[str]]]) -> None:
    """Every worker ends: given a few seconds to close its connections, then killed."""
    deadline = time.monotonic() + 5
    for proc, conn, _ in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(1)
        conn.close()
