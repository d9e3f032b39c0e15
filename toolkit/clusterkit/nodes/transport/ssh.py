"""SSHRunner: paramiko, one connection and one command per node, OpenSSH config and
known_hosts semantics, every step bounded by a timeout.  paramiko is imported lazily."""

from __future__ import annotations

import os
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .base import (
    DEFAULT_COMMAND_TIMEOUT_S,
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_FANOUT,
    ErrorKind,
    NodeFailure,
    NodeOutput,
    ResultCallback,
    RunResults,
    _Watch,
    _Watchdog,
    fan_out,
)
from .ssh_config import SSHTarget, TargetResolver
from .ssh_io import drain as _drain
from .ssh_io import handshake_failure as _handshake_failure
from .ssh_io import raise_fd_limit as _raise_fd_limit
from .ssh_keys import HostKeyPolicy, PrivateKeys, pub_blob
from .workers import fan_out_processes, worker_count

if TYPE_CHECKING:  # paramiko costs ~190 ms to import: only SSHRunner.run_many pays it
    import paramiko


def _warn_stderr(note: str) -> None:
    """A note about the SSH set-up (an unreadable known_hosts line) on stderr, as the CLI warns."""
    sys.stderr.write(f"clusterkit: warning: {note}\n")


@dataclass
class _JumpSlot:
    lock: threading.Lock = field(default_factory=threading.Lock)
    transport: paramiko.Transport | None = None
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
                 fanout: int = DEFAULT_FANOUT, use_agent: bool = True,
                 warn: Callable[[str], None] | None = None):
        self._targets = TargetResolver(ssh_config=ssh_config, user=user, port=port, identity_file=identity_file,
                                       jump_host=jump_host, known_hosts=known_hosts)
        self._host_keys = HostKeyPolicy(accept_new=accept_new_host_keys, warn=warn or _warn_stderr)
        self._keys = PrivateKeys()
        self.connect_timeout_s = connect_timeout_s
        self.command_timeout_s = command_timeout_s
        self.fanout = fanout
        self.use_agent = use_agent
        self._lock = threading.Lock()
        self._jumps: dict[tuple[tuple[str, int, str], ...], _JumpSlot] = {}
        self._resolved: dict[str, SSHTarget] = {}   # filled by run_many before the fan-out

    @classmethod
    def from_site(cls, ssh: Any, *, accept_new_host_keys: bool = False,
                  ssh_config: str | None = None) -> SSHRunner:
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
        # Each failure is reported in its NodeOutput instead.
        log = logging.getLogger("paramiko")
        if not log.handlers:
            log.addHandler(logging.NullHandler())

        timeout = self.command_timeout_s if timeout_s is None else timeout_s
        command = f"bash -c {shlex.quote(script)}"
        fanout = fanout or self.fanout
        hosts = list(dict.fromkeys(hosts))
        self._prepare(hosts)
        procs = worker_count(len(hosts), fanout)
        if procs > 1:  # each worker gets its share of the threads: fanout bounds them all
            return fan_out_processes(
                hosts, lambda share, cb: self._run_threads(share, command, timeout, fanout // procs, cb),
                workers=procs, on_result=on_result, stall_s=3 * self.connect_timeout_s + timeout + 20)
        return self._run_threads(hosts, command, timeout, fanout, on_result)

    def _run_threads(self, hosts: Sequence[str], command: str, timeout: float, fanout: int,
                     on_result: ResultCallback | None) -> RunResults:
        _raise_fd_limit(4 * min(fanout, max(len(hosts), 1)) + 64)
        budget = 3 * self.connect_timeout_s + timeout + 10
        try:
            return fan_out(hosts, lambda h, wd: self._run_one(h, command, timeout, wd),
                           fanout=fanout, budget_s=budget, on_result=on_result)
        finally:
            self._close_jumps()

    def _prepare(self, hosts: Sequence[str]) -> None:
        """Resolve every host once and index each known_hosts file for the names looked up."""
        names: dict[str, list[str]] = {}
        for host in hosts:
            try:
                target = self._targets.resolve(host)
            except NodeFailure:
                continue  # _run_one reports it
            self._resolved[host] = target
            names.setdefault(target.known_hosts, []).append(target.hostkey_name)
        for path, wanted in names.items():
            try:
                self._host_keys.prepare(path, wanted)
            except NodeFailure:
                continue  # an unreadable file: each node's check reports it

    def resolve(self, host: str) -> SSHTarget:
        """Apply the SSH config and this runner's overrides to ``host``."""
        target = self._resolved.get(host)
        return target if target is not None else self._targets.resolve(host)

    def connect(self, host: str) -> paramiko.Transport:
        """One authenticated connection to ``host`` (through its jump hosts), its key checked as
        every node's is; raises NodeFailure.  :meth:`close` closes the jump connections."""
        target = self.resolve(host)
        self._host_keys.prepare(target.known_hosts, [target.hostkey_name])
        return self._connect(target, _Watch(deadline=float("inf")))

    def close(self) -> None:
        self._close_jumps()

    @property
    def ssh_config_path(self) -> str:
        return self._targets.ssh_config_path

    @property
    def accept_new_host_keys(self) -> bool:
        return self._host_keys.accept_new

    # -- one node ---------------------------------------------------------------------

    def _run_one(self, host: str, command: str, timeout: float,
                 watchdog: _Watchdog) -> NodeOutput:
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
            return NodeOutput(host, error=kind, reason=f.reason, duration_s=time.monotonic() - t0)
        finally:
            watchdog.remove(watch)
            if transport is not None:
                transport.close()

    def _connect(self, target: SSHTarget, watch: _Watch) -> paramiko.Transport:
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
            raise NodeFailure(ErrorKind.DNS, f"cannot resolve {target.hostname}: {exc.strerror}") from None
        except ConnectionRefusedError:
            raise NodeFailure(ErrorKind.REFUSED, f"connection refused by {where}") from None
        except TimeoutError:
            raise NodeFailure(ErrorKind.TIMEOUT,
                              f"no TCP connection to {where} within {self.connect_timeout_s:g} s") from None
        except OSError as exc:
            raise NodeFailure(ErrorKind.NETWORK, f"cannot connect to {where}: {exc.strerror or exc}") from None

    def _open_via(self, jump: paramiko.Transport, target: SSHTarget) -> Any:
        import paramiko

        try:
            return jump.open_channel("direct-tcpip", (target.hostname, target.port),
                                     ("127.0.0.1", 0), timeout=self.connect_timeout_s)
        except paramiko.ChannelException as exc:
            # code 2 "Connect failed": the jump host could not reach the target.
            kind = ErrorKind.REFUSED if exc.code == 2 else ErrorKind.PROTOCOL
            raise NodeFailure(kind, f"jump host could not open {target.hostname}:{target.port}:"
                                    f" {exc.text or exc}") from None
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise NodeFailure(ErrorKind.NETWORK, f"jump host connection failed: {exc or 'closed'}") from None

    def _jump_transport(self, hop: SSHTarget) -> paramiko.Transport:
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
                raise slot.failure from None
            return slot.transport

    def _close_jumps(self) -> None:
        with self._lock:
            slots, self._jumps = list(self._jumps.values()), {}
        for slot in slots:
            if slot.transport is not None:
                slot.transport.close()

    def _handshake(self, target: SSHTarget, sock: Any) -> paramiko.Transport:
        import paramiko

        t = paramiko.Transport(sock)
        # paramiko's defaults (15 s banner, 30 s auth, no connect timeout) let one bad node
        # dominate a run: every step gets the connect timeout.
        t.banner_timeout = t.handshake_timeout = t.auth_timeout = self.connect_timeout_s
        opts = t.get_security_options()
        types = self._host_keys.known_types(target.known_hosts, target.hostkey_name)
        if types:  # ask the server for a key type we can check (paramiko doesn't by itself)
            opts.key_types = [k for k in types if k in opts.key_types] + [
                k for k in opts.key_types if k not in types]
        # AES-GCM first (OpenSSH offers it; a server that does not falls back to paramiko's
        # order): its tag is checked in C, where paramiko checks a CTR packet's HMAC in a
        # Python loop: 4.0 against 4.4 ms of client CPU per host, measured on 128 lab nodes.
        aead = [c for c in opts.ciphers if c.endswith("-gcm@openssh.com")]
        opts.ciphers = aead + [c for c in opts.ciphers if c not in aead]
        started = threading.Event()
        t.start_client(event=started)
        if not started.wait(self.connect_timeout_s + 1) or not t.is_active():
            t.close()
            raise _handshake_failure(t, target, self.connect_timeout_s)
        try:
            self._host_keys.check(target.hostkey_name, target.known_hosts, t.get_remote_server_key())
            self._authenticate(t, target)
        except BaseException:
            t.close()  # else its thread lingers until the server's LoginGraceTime
            raise
        return t

    def _authenticate(self, t: paramiko.Transport, target: SSHTarget) -> None:
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
                                      f"accept public keys (allowed: {', '.join(exc.allowed_types)})") from None
                except paramiko.AuthenticationException:
                    tried.append(label)
                except (paramiko.SSHException, EOFError, OSError) as exc:
                    raise NodeFailure(ErrorKind.PROTOCOL, f"connection lost during auth: {exc}") from None
        finally:
            if agent is not None:
                agent.close()
        raise NodeFailure(ErrorKind.AUTH, f"no key accepted for {target.user}@{target.alias} "
                          f"(tried: {', '.join(tried) or 'none available'})")

    def _candidate_keys(self, target: SSHTarget, notes: list[str]) -> Iterable[tuple[str, Any]]:
        """Agent keys (all, or with IdentitiesOnly those matching an identity file), then files."""
        files = list(target.identity_files) or [
            os.path.expanduser(f"~/.ssh/id_{t}") for t in ("ed25519", "ecdsa", "rsa")]
        wanted = {blob for f in files if (blob := pub_blob(f))}
        if self.use_agent and os.environ.get("SSH_AUTH_SOCK"):
            import paramiko

            agent = paramiko.Agent()
            yield "agent", agent  # handed back so it is closed after auth
            for key in agent.get_keys():
                if not target.identities_only or key.asbytes() in wanted:
                    yield f"agent key {key.fingerprint}", key
        for path in files:
            key = self._keys.load(path)
            if isinstance(key, str):
                if target.identity_files:  # say why a configured key was unusable
                    notes.append(f"{path} ({key})")
                continue
            yield path, key

    def _exec(self, host: str, t: paramiko.Transport, command: str, timeout: float,
              watch: _Watch, t0: float) -> NodeOutput:
        import paramiko

        watch.deadline = time.monotonic() + timeout + 2  # the watchdog backs up select()
        try:
            chan = t.open_session(timeout=self.connect_timeout_s)
            chan.exec_command(command)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            if watch.expired:
                raise NodeFailure(ErrorKind.COMMAND_TIMEOUT,
                                  f"command not started within {timeout:g} s") from None
            raise NodeFailure(ErrorKind.PROTOCOL, f"cannot start the command: {exc or 'closed'}") from None
        out, err, finished, truncated = _drain(chan, time.monotonic() + timeout)
        dt = time.monotonic() - t0
        if not finished:
            return NodeOutput(host, None, out, err, ErrorKind.COMMAND_TIMEOUT,
                              f"command still running after {timeout:g} s; abandoned", dt, truncated)
        status = chan.recv_exit_status() if chan.exit_status_ready() else -1
        if status < 0:
            return NodeOutput(host, None, out, err, ErrorKind.PROTOCOL,
                              "the command ended without an exit status (killed by a signal?)",
                              dt, truncated)
        return NodeOutput(host, status, out, err, duration_s=dt, truncated=truncated)
