"""SSHRunner: paramiko, one connection and one command per node, OpenSSH config and
known_hosts semantics, every step bounded by a timeout.  paramiko is imported lazily."""

from __future__ import annotations

import getpass
import os
import re
import select
import shlex
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from .base import (DEFAULT_COMMAND_TIMEOUT_S, DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_FANOUT,
                   MAX_OUTPUT_BYTES, SSH_CONFIG_ENV, ErrorKind, NodeFailure, NodeOutput,
                   ResultCallback, RunResults, _decode, _one_line, _Watch, _Watchdog, fan_out)

if TYPE_CHECKING:  # paramiko costs ~190 ms to import: only SSHRunner.run_many pays it
    import paramiko

def _warn_stderr(note: str) -> None:
    """A note about the SSH set-up (an unreadable known_hosts line) on stderr, as the CLI warns."""
    sys.stderr.write(f"clusterkit: warning: {note}\n")


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
                 fanout: int = DEFAULT_FANOUT, use_agent: bool = True,
                 warn: Callable[[str], None] | None = None):
        self.user = user
        self._warn = warn or _warn_stderr
        self.port = port
        self.identity_file = identity_file
        self.jump_host = jump_host
        self.known_hosts = known_hosts
        self.ssh_config_path = ssh_config if ssh_config is not None else _default_ssh_config()
        # Only the default ~/.ssh/config may be missing; a named one must exist (like ssh -F).
        self._config_named = ssh_config is not None or bool(os.environ.get(SSH_CONFIG_ENV))
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
        # Each failure is reported in its NodeOutput instead.
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
                if self._config_named and not path.is_file():
                    raise FileNotFoundError("no such file")
                # A missing ~/.ssh/config is normal; a config we cannot read is a node-level
                # CONFIG failure reported by _resolve, not a crash.
                self._config = (paramiko.SSHConfig.from_text(_config_text(path))
                                if path.is_file() else paramiko.SSHConfig())
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
        try:
            self._check_host_key(target, t.get_remote_server_key())
            self._authenticate(t, target)
        except BaseException:
            t.close()  # else its thread lingers until the server's LoginGraceTime
            raise
        return t

    def _known_db(self, path: str) -> "KnownHosts":
        with self._lock:
            db = self._known.get(path)
            if db is None:
                db = KnownHosts()
                if os.path.isfile(path):
                    try:
                        db.load(path)
                    except (OSError, UnicodeDecodeError) as exc:
                        raise NodeFailure(ErrorKind.CONFIG, f"cannot read known_hosts {path}: {exc}")
                    for note in db.warnings:
                        self._warn(note)
                self._known[path] = db
            return db

    def _check_host_key(self, target: SSHTarget, key: "paramiko.PKey") -> None:
        name, path = target.hostkey_name, target.known_hosts
        db = self._known_db(path)
        if db.is_revoked(key):  # before accept-new: a revoked key is never learnt
            raise NodeFailure(ErrorKind.HOSTKEY_CHANGED,
                              f"host key of {name} ({key.get_name()} {key.fingerprint}) is marked @revoked "
                              f"in {path}: refusing")
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
              watch: _Watch, t0: float) -> NodeOutput:
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
            return NodeOutput(host, None, out, err, ErrorKind.COMMAND_TIMEOUT,
                              f"command still running after {timeout:g} s; abandoned", dt, truncated)
        status = chan.recv_exit_status() if chan.exit_status_ready() else -1
        if status < 0:
            return NodeOutput(host, None, out, err, ErrorKind.PROTOCOL,
                              "the command ended without an exit status (killed by a signal?)",
                              dt, truncated)
        return NodeOutput(host, status, out, err, duration_s=dt, truncated=truncated)


def _config_text(path: Path, depth: int = 0) -> str:
    """The config with its ``Include`` lines replaced by the files they name (paramiko
    ignores Include; OpenSSH reads relative names from ~/.ssh and expands globs)."""
    import glob

    if depth > 16:
        raise ValueError(f"Include nested deeper than 16 files at {path}")
    out = []
    for line in path.read_text().splitlines():
        words = line.split()
        if not words or words[0].lower() != "include":
            out.append(line)
            continue
        for pattern in words[1:]:
            pattern = os.path.expanduser(pattern)
            if not os.path.isabs(pattern):
                pattern = os.path.expanduser(f"~/.ssh/{pattern}")
            for name in sorted(glob.glob(pattern)):
                if os.path.isfile(name):
                    out.append(_config_text(Path(name), depth + 1))
    return "\n".join(out) + "\n"


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
        paramiko.config.getpass = _CachedGetpass(getpass.getuser())


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


class KnownHosts:
    """known_hosts as OpenSSH reads it, as far as host key checking goes: plain, hashed and
    wildcard (``*``, ``?``, ``!``) patterns, ``@revoked`` keys refused.  Lines that cannot be
    used (``@cert-authority``: paramiko checks no certificates; unknown key types; malformed
    lines) are skipped with a warning instead of failing every host."""

    def __init__(self) -> None:
        self.entries: list[tuple[list[str], Any]] = []   # (patterns, key)
        self.revoked: list[Any] = []
        self.warnings: list[str] = []

    def load(self, path: str) -> None:
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                problem = self._line(line.strip())
                if problem:
                    self.warnings.append(f"{path}:{number}: {problem}; line skipped")

    def _line(self, line: str) -> str | None:
        import paramiko

        if not line or line.startswith("#"):
            return None
        marker = None
        if line.startswith("@"):
            marker, _, line = line.partition(" ")
            if marker not in ("@revoked", "@cert-authority"):
                return f"unknown marker {marker[:40]!r}"
            if marker == "@cert-authority":
                return "@cert-authority: host certificates are not checked by clusterkit"
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line.strip())
        except Exception as exc:  # paramiko raises a mix (InvalidHostKey, SSHException, ValueError)
            return f"malformed entry ({type(exc).__name__})"
        if entry is None:
            return "malformed entry or unsupported key type"
        if marker == "@revoked":
            self.revoked.append(entry.key)
        else:
            self.entries.append((list(entry.hostnames), entry.key))
        return None

    def lookup(self, name: str) -> dict[str, Any] | None:
        """The keys known for ``name`` by key type (None when there are none)."""
        found: dict[str, Any] = {}
        for patterns, key in self.entries:
            if _hosts_match(patterns, name):
                found.setdefault(key.get_name(), key)
        return found or None

    def add(self, name: str, keytype: str, key: Any) -> None:
        self.entries.append(([name], key))

    def is_revoked(self, key: Any) -> bool:
        return any(r.get_name() == key.get_name() and r.asbytes() == key.asbytes() for r in self.revoked)


def _hosts_match(patterns: Sequence[str], name: str) -> bool:
    """OpenSSH's rule: some pattern matches and no negated ('!') pattern does."""
    import paramiko

    hit = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern[1:] if negated else pattern
        if pattern.startswith("|1|"):
            salt = pattern.split("|")[2]
            matched = paramiko.HostKeys.hash_host(name, salt) == pattern
        else:
            regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
            matched = re.fullmatch(regex, name, re.IGNORECASE) is not None
        if matched and negated:
            return False
        hit = hit or matched
    return hit


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
