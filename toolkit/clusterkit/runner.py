"""The one seam through which preflight touches nodes: run one script on many hosts.

Every runner has the same call::

    runner.run_many(hosts, script, *, timeout_s=None, fanout=None, on_result=None) -> RunResults

* ``hosts``: node names (duplicates are run once, the result keeps the input order).
* ``script``: bash source.  Each node runs it once, as ``bash -c SCRIPT`` (SSH sends the
  remote command ``bash -c '<quoted script>'``; srun and local run bash directly).  One
  connection and one remote command per node: callers put all their checks into one script
  and delimit the sections in its output.
* ``timeout_s``: the command timeout per node (default: the runner's ``command_timeout_s``).
  Connecting has its own bound (``connect_timeout_s``); a node never takes longer than
  about ``3 * connect_timeout_s + timeout_s``, whatever it does.
* ``fanout``: how many nodes are worked on at once (default: the runner's ``fanout``, 64).
* ``on_result``: called with each :class:`NodeResult` as it finishes, in completion order,
  always from the calling thread (safe for a progress bar).

It returns :class:`RunResults`, a ``dict[host, NodeResult]`` in input order with
``interrupted`` (Ctrl-C arrived: unfinished nodes carry ``error=INTERRUPTED``; callers should
report what they have and exit 130) and ``wall_s``.  Node-level trouble never raises: a node
that cannot be reached, refuses our key, shows an unknown or changed host key, or hangs is
one result with an :class:`ErrorKind` and a one-line ``reason``.  Bugs do raise.

Runners: :class:`SSHRunner` (paramiko, imported lazily), :class:`SrunRunner` (one task per
node inside a Slurm allocation), :class:`LocalRunner` (this machine).  This module runs
commands and returns their text; it does not parse it.
"""

from __future__ import annotations

import enum
import getpass
import os
import queue
import select
import shlex
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, Sequence

if TYPE_CHECKING:  # paramiko costs ~190 ms to import: only SSHRunner.run_many pays it
    import paramiko

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


@dataclass(frozen=True)
class NodeResult:
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


class RunResults(dict[str, NodeResult]):
    """``{host: NodeResult}`` in input order, plus how the run ended."""

    def __init__(self, items: Iterable[tuple[str, NodeResult]] = (), *,
                 interrupted: bool = False, wall_s: float = 0.0):
        super().__init__(items)
        self.interrupted = interrupted
        self.wall_s = wall_s


ResultCallback = Callable[[NodeResult], None]


class Runner(Protocol):
    """Runs one script on many hosts; see the module docstring for the contract."""

    name: str

    def run_many(self, hosts: Sequence[str], script: str, *, timeout_s: float | None = None,
                 fanout: int | None = None,
                 on_result: ResultCallback | None = None) -> RunResults:
        """Run ``script`` once on every host; never raises for node-level trouble."""
        ...


class NodeFailure(Exception):
    """Internal: one node failed in a known way (becomes a NodeResult, never escapes)."""

    def __init__(self, kind: ErrorKind, reason: str):
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def _unique(hosts: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(hosts))


def _decode(data: bytes) -> str:
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
            try:
                self.closer()
            except Exception:  # closing a half-dead connection may complain; it is dead anyway
                pass


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


Work = Callable[[str, _Watchdog], NodeResult]


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
    done_q: queue.SimpleQueue[tuple[str, NodeResult | None, BaseException | None]] = queue.SimpleQueue()
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
    results: dict[str, NodeResult] = {}
    interrupted = False
    try:
        _collect(hosts, results, done_q, started, watchdog, budget_s, on_result)
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        watchdog.expire_all()
        for host in hosts:
            if host not in results:
                results[host] = NodeResult(host, error=ErrorKind.INTERRUPTED,
                                           reason="interrupted before this node finished",
                                           duration_s=_since(started.get(host)))
    finally:
        stop.set()
    return RunResults(((h, results[h]) for h in hosts), interrupted=interrupted,
                      wall_s=time.monotonic() - t0)


def _since(t: float | None) -> float:
    return time.monotonic() - t if t is not None else 0.0


def _collect(hosts: list[str], results: dict[str, NodeResult],
             done_q: queue.SimpleQueue[tuple[str, NodeResult | None, BaseException | None]],
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
                fresh.append(NodeResult(h, error=ErrorKind.TIMEOUT, duration_s=now - t,
                                        reason=f"no result within {budget_s:.0f} s; abandoned"))
        for r in fresh:
            results[r.host] = r
            if on_result is not None:
                on_result(r)


# --------------------------------------------------------------------------- local


class LocalRunner:
    """Runs the script on this machine, once per host name given (the name is a label only,
    exported to the script as ``CLUSTERKIT_HOST``).  For ``--transport local``."""

    name = "local"

    def __init__(self, *, command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S,
                 fanout: int = DEFAULT_FANOUT, env: dict[str, str] | None = None):
        self.command_timeout_s = command_timeout_s
        self.fanout = fanout
        self.env = env

    def run_many(self, hosts: Sequence[str], script: str, *, timeout_s: float | None = None,
                 fanout: int | None = None,
                 on_result: ResultCallback | None = None) -> RunResults:
        """Run ``bash -c script`` locally for every host; see the module docstring."""
        timeout = self.command_timeout_s if timeout_s is None else timeout_s
        return fan_out(hosts, lambda h, wd: self._run_one(h, script, timeout, wd),
                       fanout=fanout or self.fanout, budget_s=timeout + 10, on_result=on_result)

    def _run_one(self, host: str, script: str, timeout: float, watchdog: _Watchdog) -> NodeResult:
        t0 = time.monotonic()
        env = dict(os.environ if self.env is None else self.env, CLUSTERKIT_HOST=host)
        try:
            # Own session: on timeout or Ctrl-C we kill the whole process group.
            proc = subprocess.Popen(["bash", "-c", script], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                    start_new_session=True)
        except OSError as exc:
            return NodeResult(host, error=ErrorKind.LAUNCH, reason=f"cannot run bash: {exc}",
                              duration_s=time.monotonic() - t0)
        watch = _Watch(deadline=t0 + timeout + 5,
                       closer=lambda: os.killpg(proc.pid, signal.SIGKILL))
        watchdog.add(watch)
        try:
            out, err = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
        finally:
            watchdog.remove(watch)
        dt = time.monotonic() - t0
        if timed_out or watch.expired:
            return NodeResult(host, None, _decode(out), _decode(err), ErrorKind.COMMAND_TIMEOUT,
                              f"command still running after {timeout:g} s; killed", dt)
        return NodeResult(host, proc.returncode, _decode(out), _decode(err), duration_s=dt)


# --------------------------------------------------------------------------- ssh


@dataclass(frozen=True)
class SSHTarget:
    """Where and how to reach one host, after applying the SSH config and overrides."""

    alias: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    identities_only: bool
    hostkey_alias: str | None
    known_hosts: str
    jump: "SSHTarget | None" = None

    @property
    def hostkey_name(self) -> str:
        """The name known_hosts is searched for, OpenSSH style: ``[host]:port`` off port 22."""
        name = self.hostkey_alias or self.hostname
        return name if self.port == 22 else f"[{name}]:{self.port}"

    @property
    def chain_key(self) -> tuple[tuple[str, int, str], ...]:
        """Identity of this hop and every hop before it (jump connections are shared)."""
        own = ((self.hostname, self.port, self.user),)
        return (self.jump.chain_key if self.jump else ()) + own


def _default_ssh_config() -> str:
    return os.environ.get(SSH_CONFIG_ENV) or os.path.expanduser("~/.ssh/config")


@dataclass
class _JumpSlot:
    lock: threading.Lock = field(default_factory=threading.Lock)
    transport: Any = None
    failure: NodeFailure | None = None


class SSHRunner:
    """Runs the script over SSH (paramiko), one connection and one command per node.

    Settings given here win over the SSH config (like ``ssh -l/-p/-i/-J``); ``None`` means
    "as the config says".  The config is an OpenSSH ``ssh_config`` file (``Host``/``Match``,
    ``HostName``, ``User``, ``Port``, ``IdentityFile``, ``IdentitiesOnly``, ``ProxyJump``,
    ``HostKeyAlias``, ``UserKnownHostsFile``); default ``$CLUSTERKIT_SSH_CONFIG`` or
    ``~/.ssh/config``.  Host keys are checked against ``known_hosts`` (default: the config's
    ``UserKnownHostsFile``, else ``~/.ssh/known_hosts``): unknown and changed keys are refused;
    with ``accept_new_host_keys`` unknown ones are stored (changed ones never are).
    """

    name = "ssh"

    def __init__(self, *, user: str | None = None, port: int | None = None,
                 identity_file: str | None = None, jump_host: str | None = None,
                 known_hosts: str | None = None, ssh_config: str | None = None,
                 accept_new_host_keys: bool = False,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S,
                 fanout: int = DEFAULT_FANOUT, use_agent: bool = True):
        self.user = user
        self.port = port
        self.identity_file = identity_file
        self.jump_host = jump_host
        self.known_hosts = known_hosts
        self.ssh_config_path = ssh_config if ssh_config is not None else _default_ssh_config()
        self.accept_new_host_keys = accept_new_host_keys
        self.connect_timeout_s = connect_timeout_s
        self.command_timeout_s = command_timeout_s
        self.fanout = fanout
        self.use_agent = use_agent
        self._lock = threading.Lock()
        self._config: Any = None
        self._known: dict[str, Any] = {}
        self._keys: dict[str, Any] = {}
        self._jumps: dict[tuple[tuple[str, int, str], ...], _JumpSlot] = {}

    @classmethod
    def from_site(cls, ssh: Any, *, accept_new_host_keys: bool = False,
                  ssh_config: str | None = None) -> "SSHRunner":
        """A runner from a site's ``ssh`` section (user, port, identity_file, jump_host,
        known_hosts, connect_timeout_s, command_timeout_s, fanout; missing ones default).
        ``port`` and ``known_hosts`` count only when the site sets them explicitly."""
        # A field the site left at its default must not override the SSH config (a site's
        # implicit port 22 would hide the config's Port): pydantic knows which were set.
        explicit = getattr(ssh, "model_fields_set", None)

        def get(name: str, default: Any = None) -> Any:
            value = getattr(ssh, name, None)
            if explicit is not None and name in ("port", "known_hosts") and name not in explicit:
                value = None
            return default if value is None else value

        known = get("known_hosts")
        ident = get("identity_file")
        return cls(user=get("user"), port=get("port"), jump_host=get("jump_host"),
                   identity_file=os.path.expanduser(str(ident)) if ident else None,
                   known_hosts=os.path.expanduser(str(known)) if known else None,
                   ssh_config=ssh_config, accept_new_host_keys=accept_new_host_keys,
                   connect_timeout_s=float(get("connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S)),
                   command_timeout_s=float(get("command_timeout_s", DEFAULT_COMMAND_TIMEOUT_S)),
                   fanout=int(get("fanout", DEFAULT_FANOUT)))

    # -- public -----------------------------------------------------------------------

    def run_many(self, hosts: Sequence[str], script: str, *, timeout_s: float | None = None,
                 fanout: int | None = None,
                 on_result: ResultCallback | None = None) -> RunResults:
        """Run ``script`` on every host over SSH; see the module docstring."""
        import logging

        import paramiko  # noqa: F401  (lazy: fail here, not at clusterkit import)

        # paramiko logs every failed handshake with a traceback; without a handler of the
        # application's, Python's last-resort handler would print them on the user's stderr.
        # Each failure is reported in its NodeResult instead.
        log = logging.getLogger("paramiko")
        if not log.handlers:
            log.addHandler(logging.NullHandler())

        timeout = self.command_timeout_s if timeout_s is None else timeout_s
        command = f"bash -c {shlex.quote(script)}"
        _raise_fd_limit(4 * min(fanout or self.fanout, max(len(hosts), 1)) + 64)
        budget = 3 * self.connect_timeout_s + timeout + 10
        try:
            return fan_out(hosts, lambda h, wd: self._run_one(h, command, timeout, wd),
                           fanout=fanout or self.fanout, budget_s=budget, on_result=on_result)
        finally:
            self._close_jumps()

    def resolve(self, host: str) -> SSHTarget:
        """Apply the SSH config and this runner's overrides to ``host``."""
        return self._resolve(host, self.jump_host, depth=0)

    # -- config -----------------------------------------------------------------------

    def _ssh_config(self) -> Any:
        with self._lock:
            if self._config is None:
                import paramiko

                _speed_up_config_matching()
                path = Path(os.path.expanduser(self.ssh_config_path))
                # A missing ~/.ssh/config is normal; a config we cannot read is a node-level
                # CONFIG failure reported by _resolve, not a crash.
                self._config = (paramiko.SSHConfig.from_path(str(path)) if path.is_file()
                                else paramiko.SSHConfig())
            return self._config

    def _resolve(self, host: str, jump_spec: str | None, depth: int) -> SSHTarget:
        if depth > 8:
            raise NodeFailure(ErrorKind.CONFIG, "ProxyJump chain deeper than 8 hops (a loop?)")
        user, _, rest = host.rpartition("@")
        name, port_s = (rest.rsplit(":", 1) if rest.count(":") == 1 else (rest, ""))
        try:
            opts = self._ssh_config().lookup(name)
        except Exception as exc:  # paramiko raises assorted errors on odd configs
            raise NodeFailure(ErrorKind.CONFIG, f"ssh config {self.ssh_config_path}: {exc}")
        if opts.get("proxycommand") and not opts.get("proxyjump") and jump_spec is None:
            raise NodeFailure(ErrorKind.CONFIG, "ProxyCommand is not supported; use ProxyJump")
        port = int(port_s or (self.port if depth == 0 and self.port else opts.get("port", 22)))
        ident = ([self.identity_file] if self.identity_file else []) + [
            os.path.expanduser(p) for p in opts.get("identityfile", [])]
        spec = jump_spec if jump_spec is not None else opts.get("proxyjump")
        target = SSHTarget(
            alias=name, hostname=opts.get("hostname", name), port=port,
            user=user or (self.user if depth == 0 and self.user else None)
            or opts.get("user") or getpass.getuser(),
            identity_files=tuple(dict.fromkeys(ident)),
            identities_only=opts.get("identitiesonly", "no").lower() == "yes",
            hostkey_alias=opts.get("hostkeyalias"),
            known_hosts=self._known_hosts_path(opts))
        if spec and spec.lower() != "none":
            target = _with_jump(target, self._jump_chain(spec, depth))
        return target

    def _jump_chain(self, spec: str, depth: int) -> SSHTarget:
        """``a,b`` means: reach b through a, then the target through b."""
        hop: SSHTarget | None = None
        for part in (p.strip() for p in spec.split(",") if p.strip()):
            nxt = self._resolve(part, None if hop is None else "none", depth + 1)
            hop = nxt if hop is None else _with_jump(nxt, hop)
        if hop is None:
            raise NodeFailure(ErrorKind.CONFIG, f"empty ProxyJump {spec!r}")
        return hop

    def _known_hosts_path(self, opts: Any) -> str:
        if self.known_hosts:
            return os.path.expanduser(self.known_hosts)
        files = (opts.get("userknownhostsfile") or "").split()
        return os.path.expanduser(files[0] if files else "~/.ssh/known_hosts")

    # -- one node ---------------------------------------------------------------------

    def _run_one(self, host: str, command: str, timeout: float,
                 watchdog: _Watchdog) -> NodeResult:
        t0 = time.monotonic()
        watch = _Watch(deadline=t0 + 3 * self.connect_timeout_s)
        watchdog.add(watch)
        transport = None
        try:
            target = self.resolve(host)
            transport = self._connect(target, watch)
            return self._exec(host, transport, command, timeout, watch, t0)
        except NodeFailure as f:
            kind = f.kind
            if watch.expired and kind in (ErrorKind.PROTOCOL, ErrorKind.NETWORK):
                kind = ErrorKind.TIMEOUT  # we closed it: the connect phase outlived its bound
            return NodeResult(host, error=kind, reason=f.reason, duration_s=time.monotonic() - t0)
        finally:
            watchdog.remove(watch)
            if transport is not None:
                transport.close()

    def _connect(self, target: SSHTarget, watch: _Watch) -> "paramiko.Transport":
        """TCP (or a channel through the jump host), SSH handshake, host key, auth."""
        if target.jump is not None:
            sock = self._open_via(self._jump_transport(target.jump), target)
        else:
            sock = self._tcp(target)
        watch.closer = sock.close
        transport = self._handshake(target, sock)
        watch.closer = transport.close
        return transport

    def _tcp(self, target: SSHTarget) -> socket.socket:
        where = f"{target.hostname}:{target.port}"
        try:
            return socket.create_connection((target.hostname, target.port),
                                            timeout=self.connect_timeout_s)
        except socket.gaierror as exc:
            raise NodeFailure(ErrorKind.DNS, f"cannot resolve {target.hostname}: {exc.strerror}")
        except ConnectionRefusedError:
            raise NodeFailure(ErrorKind.REFUSED, f"connection refused by {where}")
        except (socket.timeout, TimeoutError):
            raise NodeFailure(ErrorKind.TIMEOUT,
                              f"no TCP connection to {where} within {self.connect_timeout_s:g} s")
        except OSError as exc:
            raise NodeFailure(ErrorKind.NETWORK, f"cannot connect to {where}: {exc.strerror or exc}")

    def _open_via(self, jump: "paramiko.Transport", target: SSHTarget) -> Any:
        import paramiko

        try:
            return jump.open_channel("direct-tcpip", (target.hostname, target.port),
                                     ("127.0.0.1", 0), timeout=self.connect_timeout_s)
        except paramiko.ChannelException as exc:
            # code 2 "Connect failed": the jump host could not reach the target.
            kind = ErrorKind.REFUSED if exc.code == 2 else ErrorKind.PROTOCOL
            raise NodeFailure(kind, f"jump host could not open {target.hostname}:{target.port}:"
                                    f" {exc.text or exc}")
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise NodeFailure(ErrorKind.NETWORK, f"jump host connection failed: {exc or 'closed'}")

    def _jump_transport(self, hop: SSHTarget) -> "paramiko.Transport":
        """One shared, authenticated connection per jump host (and per chain)."""
        with self._lock:
            slot = self._jumps.setdefault(hop.chain_key, _JumpSlot())
        with slot.lock:
            if slot.transport is not None and slot.transport.is_active():
                return slot.transport
            if slot.failure is not None:
                raise slot.failure
            try:
                slot.transport = self._connect(hop, _Watch(deadline=float("inf")))
            except NodeFailure as f:
                slot.failure = NodeFailure(f.kind, f"jump host {hop.alias}: {f.reason}")
                raise slot.failure
            return slot.transport

    def _close_jumps(self) -> None:
        with self._lock:
            slots, self._jumps = list(self._jumps.values()), {}
        for slot in slots:
            if slot.transport is not None:
                slot.transport.close()

    def _handshake(self, target: SSHTarget, sock: Any) -> "paramiko.Transport":
        import paramiko

        t = paramiko.Transport(sock)
        # paramiko's defaults (15 s banner, 30 s auth, no connect timeout) let one bad node
        # dominate a run: every step gets the connect timeout.
        t.banner_timeout = t.handshake_timeout = t.auth_timeout = self.connect_timeout_s
        known = self._known_db(target.known_hosts)
        with self._lock:
            entry = known.lookup(target.hostkey_name)
            if entry:  # ask the server for a key type we can check (paramiko doesn't by itself)
                opts = t.get_security_options()
                types = list(entry.keys())
                opts.key_types = [k for k in types if k in opts.key_types] + [
                    k for k in opts.key_types if k not in types]
        started = threading.Event()
        t.start_client(event=started)
        if not started.wait(self.connect_timeout_s + 1) or not t.is_active():
            t.close()
            raise _handshake_failure(t, target, self.connect_timeout_s)
        self._check_host_key(target, t.get_remote_server_key())
        self._authenticate(t, target)
        return t

    def _known_db(self, path: str) -> Any:
        import paramiko

        with self._lock:
            db = self._known.get(path)
            if db is None:
                db = paramiko.HostKeys()
                if os.path.isfile(path):
                    try:
                        db.load(path)
                    except Exception as exc:  # a corrupt line: refuse every host, say why
                        raise NodeFailure(ErrorKind.CONFIG, f"cannot read known_hosts {path}: {exc}")
                self._known[path] = db
            return db

    def _check_host_key(self, target: SSHTarget, key: "paramiko.PKey") -> None:
        name, path = target.hostkey_name, target.known_hosts
        db = self._known_db(path)
        with self._lock:  # lookup and accept-new together: two threads must not both append
            entry = db.lookup(name)
            if entry is None:
                if not self.accept_new_host_keys:
                    raise NodeFailure(ErrorKind.HOSTKEY_UNKNOWN,
                                      f"host key of {name} ({key.get_name()} {key.fingerprint}) "
                                      f"is not in {path}; verify it, or use --accept-new-host-keys")
                _append_known_host(path, name, key)
                db.add(name, key.get_name(), key)
                return
        if entry.get(key.get_name()) != key:
            raise NodeFailure(ErrorKind.HOSTKEY_CHANGED,
                              f"host key of {name} differs from {path} (now {key.get_name()} "
                              f"{key.fingerprint}): refusing; possible man-in-the-middle or a "
                              f"reinstalled node")

    def _authenticate(self, t: "paramiko.Transport", target: SSHTarget) -> None:
        import paramiko

        tried: list[str] = []
        agent = None
        try:
            for label, key in self._candidate_keys(target, tried):
                if isinstance(key, paramiko.Agent):
                    agent = key
                    continue
                try:
                    t.auth_publickey(target.user, key)
                    if t.is_authenticated():
                        return
                except paramiko.BadAuthenticationType as exc:
                    raise NodeFailure(ErrorKind.AUTH, f"{target.user}@{target.alias} does not "
                                      f"accept public keys (allowed: {', '.join(exc.allowed_types)})")
                except paramiko.AuthenticationException:
                    tried.append(label)
                except (paramiko.SSHException, EOFError, OSError) as exc:
                    raise NodeFailure(ErrorKind.PROTOCOL, f"connection lost during auth: {exc}")
        finally:
            if agent is not None:
                agent.close()
        raise NodeFailure(ErrorKind.AUTH, f"no key accepted for {target.user}@{target.alias} "
                          f"(tried: {', '.join(tried) or 'none available'})")

    def _candidate_keys(self, target: SSHTarget, notes: list[str]) -> Iterable[tuple[str, Any]]:
        """Agent keys (all, or with IdentitiesOnly those matching an identity file), then files."""
        files = list(target.identity_files) or [
            os.path.expanduser(f"~/.ssh/id_{t}") for t in ("ed25519", "ecdsa", "rsa")]
        wanted = {blob for f in files if (blob := _pub_blob(f))}
        if self.use_agent and os.environ.get("SSH_AUTH_SOCK"):
            import paramiko

            agent = paramiko.Agent()
            yield "agent", agent  # handed back so it is closed after auth
            for key in agent.get_keys():
                if not target.identities_only or key.asbytes() in wanted:
                    yield f"agent key {key.fingerprint}", key
        for path in files:
            key = self._load_key(path)
            if isinstance(key, str):
                if target.identity_files:  # say why a configured key was unusable
                    notes.append(f"{path} ({key})")
                continue
            yield path, key

    def _load_key(self, path: str) -> Any:
        """A private key, loaded once per run; a str saying why not when unusable."""
        import paramiko

        with self._lock:
            if path in self._keys:
                return self._keys[path]
        try:
            key: Any = paramiko.PKey.from_path(path)
        except FileNotFoundError:
            key = "missing"
        except paramiko.PasswordRequiredException:
            key = "encrypted; load it into ssh-agent"
        except TypeError as exc:  # cryptography's way of saying "needs a passphrase"
            key = "encrypted; load it into ssh-agent" if "password" in str(exc) else f"unreadable: {exc}"
        except (paramiko.SSHException, OSError, ValueError) as exc:
            key = f"unreadable: {exc}"
        with self._lock:
            self._keys[path] = key
        return key

    def _exec(self, host: str, t: "paramiko.Transport", command: str, timeout: float,
              watch: _Watch, t0: float) -> NodeResult:
        import paramiko

        watch.deadline = time.monotonic() + timeout + 2  # the watchdog backs up select()
        try:
            chan = t.open_session(timeout=self.connect_timeout_s)
            chan.exec_command(command)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            if watch.expired:
                raise NodeFailure(ErrorKind.COMMAND_TIMEOUT,
                                  f"command not started within {timeout:g} s")
            raise NodeFailure(ErrorKind.PROTOCOL, f"cannot start the command: {exc or 'closed'}")
        out, err, finished, truncated = _drain(chan, time.monotonic() + timeout)
        dt = time.monotonic() - t0
        if not finished:
            return NodeResult(host, None, out, err, ErrorKind.COMMAND_TIMEOUT,
                              f"command still running after {timeout:g} s; abandoned", dt, truncated)
        status = chan.recv_exit_status() if chan.exit_status_ready() else -1
        if status < 0:
            return NodeResult(host, None, out, err, ErrorKind.PROTOCOL,
                              "the command ended without an exit status (killed by a signal?)",
                              dt, truncated)
        return NodeResult(host, status, out, err, duration_s=dt, truncated=truncated)


class _CachedGetpass:
    """Stands in for the ``getpass`` module inside ``paramiko.config``."""

    def __init__(self, user: str):
        self._user = user

    def getuser(self) -> str:
        return self._user


def _speed_up_config_matching() -> None:
    """paramiko's SSHConfig.lookup calls getpass.getuser() (environment + passwd lookups) for
    every stanza of the file, twice per host: with one ``Host`` stanza per node (256 here)
    that was 5 ms of CPU per host, 40% of clusterkit's client CPU in bench/preflight.py.
    The local user does not change while we run, so paramiko gets a cached answer."""
    import paramiko.config

    if not isinstance(paramiko.config.getpass, _CachedGetpass):
        paramiko.config.getpass = _CachedGetpass(getpass.getuser())  # type: ignore[assignment]


def _raise_fd_limit(needed: int) -> None:
    """Each node in flight holds a socket and a pipe pair: lift the soft limit (1024 by
    default) toward the hard one so a large fan-out does not fail with EMFILE."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        if target > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _with_jump(target: SSHTarget, jump: SSHTarget) -> SSHTarget:
    return SSHTarget(**{**target.__dict__, "jump": jump})


def _pub_blob(private_path: str) -> bytes | None:
    import base64
    import binascii

    try:
        fields = Path(private_path + ".pub").read_text().split()
        return base64.b64decode(fields[1]) if len(fields) >= 2 else None
    except (OSError, binascii.Error, UnicodeDecodeError):
        return None


def _append_known_host(path: str, name: str, key: Any) -> None:
    """Store a newly accepted key the way ssh's accept-new does (plain, not hashed)."""
    p = Path(path)
    p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    line = f"{name} {key.get_name()} {key.get_base64()}\n"
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as f:
        f.write(line)


def _handshake_failure(t: Any, target: SSHTarget, timeout: float) -> NodeFailure:
    """Name what went wrong before the SSH session was up."""
    where = f"{target.hostname}:{target.port}"
    exc = t.get_exception()
    cause = exc.__context__ if exc is not None else None
    text = str(exc) if exc is not None else ""
    if exc is None or isinstance(cause, (socket.timeout, TimeoutError)):
        what = "SSH banner" if "banner" in text or exc is None else "SSH handshake"
        return NodeFailure(ErrorKind.TIMEOUT, f"no {what} from {where} within {timeout:g} s "
                                              f"(not an SSH server, or overloaded)")
    if "banner" in text:
        return NodeFailure(ErrorKind.PROTOCOL, f"{where} closed the connection before the SSH "
                                               f"banner (sshd MaxStartups, or a filter)")
    return NodeFailure(ErrorKind.PROTOCOL, f"SSH handshake with {where} failed: "
                                           f"{_one_line(text or type(exc).__name__)}")


def _drain(chan: Any, deadline: float) -> tuple[str, str, bool, bool]:
    """Read stdout and stderr until the command ends or ``deadline``; never block past it."""
    out, err = bytearray(), bytearray()
    truncated = False
    poller = select.poll()  # not select(): fds past 1024 with a large fan-out
    poller.register(chan.fileno(), select.POLLIN)  # paramiko's pipe: data on either stream, or close
    while True:
        while chan.recv_ready():
            truncated |= _append(out, chan.recv(65536))
        while chan.recv_stderr_ready():
            truncated |= _append(err, chan.recv_stderr(65536))
        if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
            if chan.closed or chan.eof_received:
                return _decode(out), _decode(err), True, truncated
        if chan.closed:
            return _decode(out), _decode(err), chan.exit_status_ready(), truncated
        left = deadline - time.monotonic()
        if left <= 0:
            return _decode(out), _decode(err), False, truncated
        poller.poll(min(left, 1.0) * 1000)


def _append(buf: bytearray, data: bytes) -> bool:
    room = MAX_OUTPUT_BYTES - len(buf)
    buf.extend(data[: max(room, 0)])
    return len(data) > room


# --------------------------------------------------------------------------- srun


class SrunRunner:
    """Runs the script inside a Slurm allocation: one ``srun`` step, one task per node.

    For sites that block SSH to compute nodes, and for the rendered job script's own first
    step.  ``srun --nodes=N --ntasks=N --ntasks-per-node=1 --nodelist=HOSTS --label`` runs a
    small bash wrapper on each node that prints a marker with the Slurm node name, runs the
    script under ``timeout`` and prints a marker with its exit status; ``--label`` tags each
    output line with the task, so the outputs are told apart without a shared filesystem.
    Outside an allocation srun asks Slurm for one, as srun does.  ``fanout`` is ignored
    (Slurm launches all tasks at once).  Output is line based: a missing final newline
    is kept, but stdout and stderr lose their relative order.
    """

    name = "srun"

    def __init__(self, *, command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S,
                 launch_timeout_s: float = 60.0, srun: str = "srun",
                 extra_args: Sequence[str] = (), env: dict[str, str] | None = None,
                 fanout: int = DEFAULT_FANOUT):
        self.command_timeout_s = command_timeout_s
        self.launch_timeout_s = launch_timeout_s
        self.srun = srun
        self.extra_args = tuple(extra_args)
        self.env = env
        self.fanout = fanout

    def argv(self, hosts: Sequence[str], script: str, timeout: float, marker: str) -> list[str]:
        """The srun command line for ``hosts`` (exposed for ``--dry-run`` style displays)."""
        from clusterkit.nodes import fold

        n = str(len(hosts))
        # $1 script, $2 timeout, $3 marker.  `timeout -k 2` so a script ignoring TERM dies too.
        # The exit marker goes to both streams: srun keeps each stream's order per task but not
        # the order between them, so a node is complete once both markers have arrived.
        wrapper = ('printf "%s node %s\\n" "$3" "${SLURMD_NODENAME:-$(hostname -s)}"; '
                   'timeout -k 2 "$2" bash -c "$1"; rc=$?; printf "%s exit %s\\n" "$3" "$rc"; '
                   'printf "%s exit %s\\n" "$3" "$rc" >&2')
        return [self.srun, "--nodes", n, "--ntasks", n, "--ntasks-per-node", "1",
                "--nodelist", fold(hosts), "--label", "--kill-on-bad-exit=0", "--overlap",
                "--job-name", "clusterkit-preflight", *self.extra_args,
                "bash", "-c", wrapper, "clusterkit-preflight", script, f"{timeout:g}", marker]

    def run_many(self, hosts: Sequence[str], script: str, *, timeout_s: float | None = None,
                 fanout: int | None = None,
                 on_result: ResultCallback | None = None) -> RunResults:
        """Run ``script`` once on every host with one srun step; see the module docstring."""
        import secrets

        hosts = _unique(hosts)
        timeout = self.command_timeout_s if timeout_s is None else timeout_s
        marker = f"@@clusterkit-{secrets.token_hex(6)}"
        step = _SrunStep(hosts, marker, on_result)
        t0 = time.monotonic()
        interrupted = False
        try:
            step.start(self.argv(hosts, script, timeout, marker), self.env)
            step.wait(self.launch_timeout_s + timeout + 5)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            step.stop()
        return RunResults(((h, step.result(h, timeout, interrupted)) for h in hosts),
                          interrupted=interrupted, wall_s=time.monotonic() - t0)


class _SrunStep:
    """One running srun and what its labelled output said so far."""

    def __init__(self, hosts: list[str], marker: str, on_result: ResultCallback | None):
        self.hosts = hosts
        self.marker = marker
        self.on_result = on_result
        self.task_host: dict[str, str] = {}           # task label -> node name
        self.out: dict[str, list[str]] = {}           # task label -> stdout lines
        self.err: dict[str, list[str]] = {}           # task label -> stderr lines
        self.status: dict[str, int] = {}              # task label -> exit status
        self.ends: dict[str, set[bool]] = {}          # task label -> streams that ended
        self.srun_err: list[str] = []                 # srun's own messages
        self.t0 = time.monotonic()
        self.done: dict[str, NodeResult] = {}
        self.events: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.proc: subprocess.Popen[bytes] | None = None
        self.launch_error = ""
        self.timed_out = False

    def start(self, argv: list[str], env: dict[str, str] | None) -> None:
        try:
            # Own session: the terminal's Ctrl-C reaches us, and we end the step ourselves.
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env, start_new_session=True)
        except OSError as exc:
            self.launch_error = f"cannot run {argv[0]}: {exc.strerror or exc}"
            return
        threading.Thread(target=self._read, args=(self.proc.stdout, True), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, False), daemon=True).start()

    def _read(self, stream: Any, is_stdout: bool) -> None:
        for raw in stream:
            self.events.put(("o" if is_stdout else "e") + _decode(raw).rstrip("\n"))
        self.events.put("x")

    def wait(self, limit_s: float) -> None:
        """Consume output until srun's streams close or ``limit_s`` passes."""
        if self.proc is None:
            return
        closed = 0
        deadline = time.monotonic() + limit_s
        while closed < 2:
            left = deadline - time.monotonic()
            if left <= 0:
                self.timed_out = True
                return
            try:
                ev = self.events.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if ev == "x":
                closed += 1
            else:
                self._line(ev[0] == "o", ev[1:])

    def _line(self, is_stdout: bool, line: str) -> None:
        label, sep, text = line.partition(": ")
        label = label.strip()
        if not sep or not label.isdigit():
            if line.strip():
                self.srun_err.append(line)  # srun's own messages are not labelled
            return
        mark = text.find(self.marker + " ")
        if mark < 0:
            (self.out if is_stdout else self.err).setdefault(label, []).append(text + "\n")
            return
        before, _, rest = text[:mark], None, text[mark + len(self.marker) + 1:]
        word, _, value = rest.partition(" ")
        if before:  # the script's last line had no newline
            (self.out if is_stdout else self.err).setdefault(label, []).append(before)
        if word == "node":
            self.task_host[label] = value.strip()
        elif word == "exit":
            ends = self.ends.setdefault(label, set())
            ends.add(is_stdout)
            self.status[label] = int(value) if value.strip().lstrip("-").isdigit() else -1
            if len(ends) == 2 and label in self.task_host:
                self._finish(self.task_host[label], label)

    def _finish(self, host: str, label: str) -> None:
        rc = self.status[label]
        out, err = "".join(self.out.get(label, [])), "".join(self.err.get(label, []))
        dt = time.monotonic() - self.t0
        if rc == 124:  # coreutils timeout's "timed out" status
            res = NodeResult(host, None, out, err, ErrorKind.COMMAND_TIMEOUT,
                             "command still running at its timeout; killed on the node", dt)
        else:
            res = NodeResult(host, rc, out, err, duration_s=dt)
        self.done[host] = res
        if self.on_result is not None:
            self.on_result(res)

    def stop(self) -> None:
        """End srun if it still runs (TERM ends the step; KILL if it lingers)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def result(self, host: str, timeout: float, interrupted: bool) -> NodeResult:
        """The node's result, or why it has none."""
        label = next((t for t, h in self.task_host.items() if h == host), None)
        if host not in self.done and label in self.status and not interrupted:
            self._finish(host, label)  # srun ended after one stream's marker: good enough
        if host in self.done:
            return self.done[host]
        dt = time.monotonic() - self.t0
        out = "".join(self.out.get(label, [])) if label else ""
        err = "".join(self.err.get(label, [])) if label else ""
        if interrupted:
            return NodeResult(host, None, out, err, ErrorKind.INTERRUPTED,
                              "interrupted before this node finished", dt)
        if self.timed_out and label is not None:
            return NodeResult(host, None, out, err, ErrorKind.COMMAND_TIMEOUT,
                              f"no exit status within {timeout:g} s; srun stopped", dt)
        why = self.launch_error or _one_line(" | ".join(self.srun_err[-3:])) or "no output from srun"
        if self.timed_out:
            why = f"srun did not start a task here in time ({why})"
        return NodeResult(host, None, out, err, ErrorKind.LAUNCH, why, dt)
