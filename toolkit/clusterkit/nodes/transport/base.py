"""The runner contract (results, error kinds, the Runner protocol) and the fan-out engine
that the SSH and local runners share: bounded threads, a watchdog, Ctrl-C handling."""

from __future__ import annotations

import contextlib
import enum
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

DEFAULT_FANOUT = 64
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_COMMAND_TIMEOUT_S = 30.0
MAX_OUTPUT_BYTES = 16 * 1024 * 1024  # per stream per node: a runaway node must not eat our memory
SSH_CONFIG_ENV = "CLUSTERKIT_SSH_CONFIG"


class ErrorKind(str, enum.Enum):
    """Why a node has no (complete) result.  The values are stable: they appear in JSON."""

    REFUSED = "refused"                  # TCP connection refused (nothing listens)
    TIMEOUT = "timeout"                  # no TCP connection, SSH banner or handshake in time
    DNS = "dns"                          # the name does not resolve
    NETWORK = "network"                  # other socket errors (no route, reset, ...)
    AUTH = "auth"                        # none of our keys was accepted
    HOSTKEY_UNKNOWN = "hostkey-unknown"  # host key not in known_hosts (and not accepting new)
    HOSTKEY_CHANGED = "hostkey-changed"  # known_hosts has a different key: never accepted
    PROTOCOL = "protocol"                # not SSH, broken handshake, channel refused, ...
    COMMAND_TIMEOUT = "command-timeout"  # connected, but the command outlived its timeout
    CONFIG = "config"                    # the SSH config asks for something we cannot do
    LAUNCH = "launch"                    # srun/local could not start the command on the node
    INTERRUPTED = "interrupted"          # Ctrl-C arrived before the node finished
    UNAVAILABLE = "unavailable"          # Slurm has the node drained, down or failing: not asked at all


@dataclass(frozen=True)
class NodeOutput:
    """What running the script on one node gave."""

    host: str
    exit_status: int | None = None
    stdout: str = ""
    stderr: str = ""
    error: ErrorKind | None = None
    reason: str = ""          # one line, empty when error is None
    duration_s: float = 0.0
    truncated: bool = False   # output past MAX_OUTPUT_BYTES was dropped

    @property
    def reachable(self) -> bool:
        """The command ran on the node (it may still have failed or timed out)."""
        return self.error is None or self.error is ErrorKind.COMMAND_TIMEOUT

    @property
    def ok(self) -> bool:
        """The command ran to completion and exited 0."""
        return self.error is None and self.exit_status == 0

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (error as its string value)."""
        return {"host": self.host, "ok": self.ok, "reachable": self.reachable,
                "exit_status": self.exit_status, "error": self.error.value if self.error else None,
                "reason": self.reason, "duration_s": round(self.duration_s, 3),
                "truncated": self.truncated, "stdout": self.stdout, "stderr": self.stderr}


class RunResults(dict[str, NodeOutput]):
    """``{host: NodeOutput}`` in input order, plus how the run ended."""

    def __init__(self, items: Iterable[tuple[str, NodeOutput]] = (), *,
                 interrupted: bool = False, wall_s: float = 0.0):
        super().__init__(items)
        self.interrupted = interrupted
        self.wall_s = wall_s


ResultCallback = Callable[[NodeOutput], None]


class Runner(Protocol):
    """Runs one script on many hosts; see the module docstring for the contract."""

    name: str

    def run_many(self, hosts: Sequence[str], script: str, *, timeout_s: float | None = None,
                 fanout: int | None = None,
                 on_result: ResultCallback | None = None) -> RunResults:
        """Run ``script`` once on every host; never raises for node-level trouble."""
        ...


class NodeFailure(Exception):
    """Internal: one node failed in a known way (becomes a NodeOutput, never escapes)."""

    def __init__(self, kind: ErrorKind, reason: str):
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def _unique(hosts: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(hosts))


def _decode(data: bytes | bytearray) -> str:
    return data.decode("utf-8", errors="replace")


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


# --------------------------------------------------------------------------- fan-out engine


@dataclass
class _Watch:
    """A node being worked on: the watchdog closes ``closer`` once ``deadline`` passes."""

    deadline: float
    closer: Callable[[], None] | None = None
    expired: bool = False

    def expire(self) -> None:
        self.expired = True
        if self.closer is not None:
            # closing a half-dead connection may complain; it is dead anyway
            with contextlib.suppress(Exception):
                self.closer()


class _Watchdog:
    """Deadlines of nodes in flight, checked by the calling thread every tick."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, _Watch] = {}

    def add(self, watch: _Watch) -> None:
        with self._lock:
            self._live[id(watch)] = watch

    def remove(self, watch: _Watch) -> None:
        with self._lock:
            self._live.pop(id(watch), None)

    def tick(self, now: float) -> None:
        with self._lock:
            due = [w for w in self._live.values() if now >= w.deadline and not w.expired]
        for w in due:
            w.expire()

    def expire_all(self) -> None:
        with self._lock:
            live = list(self._live.values())
        for w in live:
            w.expire()


Work = Callable[[str, _Watchdog], NodeOutput]


def fan_out(hosts: Sequence[str], work: Work, *, fanout: int, budget_s: float,
            on_result: ResultCallback | None = None) -> RunResults:
    """Run ``work(host, watchdog)`` for every host on at most ``fanout`` daemon threads.

    ``budget_s`` is the most one node may take; a worker still busy past it is abandoned and
    its node reported as TIMEOUT (the last line of defence against a library call that
    ignores its timeout).  Ctrl-C stops handing out hosts, closes the live connections via
    the watchdog and returns what finished, flagged ``interrupted``.
    """
    hosts = _unique(hosts)
    t0 = time.monotonic()
    todo: queue.SimpleQueue[str] = queue.SimpleQueue()
    for h in hosts:
        todo.put(h)
    done_q: queue.SimpleQueue[tuple[str, NodeOutput | None, BaseException | None]] = queue.SimpleQueue()
    started: dict[str, float] = {}
    stop = threading.Event()
    watchdog = _Watchdog()

    def worker() -> None:
        while not stop.is_set():
            try:
                host = todo.get_nowait()
            except queue.Empty:
                return
            started[host] = time.monotonic()
            try:
                done_q.put((host, work(host, watchdog), None))
            except BaseException as exc:  # a bug: handed to the calling thread, which raises it
                done_q.put((host, None, exc))

    # Daemon threads, not a ThreadPoolExecutor: a worker stuck in connect() must not keep
    # the interpreter alive after Ctrl-C.
    for i in range(max(1, min(fanout, len(hosts)))):
        threading.Thread(target=worker, name=f"clusterkit-runner-{i}", daemon=True).start()
    results: dict[str, NodeOutput] = {}
    interrupted = False
    try:
        _collect(hosts, results, done_q, started, watchdog, budget_s, on_result)
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        watchdog.expire_all()
        for host in hosts:
            if host not in results:
                results[host] = NodeOutput(host, error=ErrorKind.INTERRUPTED,
                                           reason="interrupted before this node finished",
                                           duration_s=_since(started.get(host)))
    finally:
        stop.set()
    return RunResults(((h, results[h]) for h in hosts), interrupted=interrupted,
                      wall_s=time.monotonic() - t0)


def _since(t: float | None) -> float:
    return time.monotonic() - t if t is not None else 0.0


def _collect(hosts: list[str], results: dict[str, NodeOutput],
             done_q: queue.SimpleQueue[tuple[str, NodeOutput | None, BaseException | None]],
             started: dict[str, float], watchdog: _Watchdog, budget_s: float,
             on_result: ResultCallback | None) -> None:
    """The calling thread's loop: gather results, run the watchdog, enforce the budget."""
    while len(results) < len(hosts):
        try:
            host, res, exc = done_q.get(timeout=0.1)
        except queue.Empty:
            host, res, exc = "", None, None
        now = time.monotonic()
        watchdog.tick(now)
        if exc is not None:
            raise exc
        fresh = [res] if res is not None and host not in results else []
        for h, t in started.copy().items():  # workers add to it concurrently
            if h not in results and now - t > budget_s and all(r.host != h for r in fresh):
                fresh.append(NodeOutput(h, error=ErrorKind.TIMEOUT, duration_s=now - t,
                                        reason=f"no result within {budget_s:.0f} s; abandoned"))
        for r in fresh:
            results[r.host] = r
            if on_result is not None:
                on_result(r)
