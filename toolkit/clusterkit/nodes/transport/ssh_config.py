"""Where and how to reach a host over SSH: the OpenSSH client config (``Host``/``Match``,
``Include``, ``HostName``, ``User``, ``Port``, ``IdentityFile``, ``ProxyJump``...) and the
runner's own settings, applied as ssh applies them.  paramiko is imported lazily."""

from __future__ import annotations

import getpass
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import SSH_CONFIG_ENV, ErrorKind, NodeFailure


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
    jump: SSHTarget | None = None

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


def default_ssh_config() -> str:
    return os.environ.get(SSH_CONFIG_ENV) or os.path.expanduser("~/.ssh/config")


class TargetResolver:
    """Applies the SSH config, then the runner's settings, which win like ``ssh -l/-p/-i/-J``
    (``None``: as the config says).  Only the default ``~/.ssh/config`` may be missing; a
    named config (argument or ``$CLUSTERKIT_SSH_CONFIG``) must exist, as with ``ssh -F``."""

    def __init__(self, *, ssh_config: str | None = None, user: str | None = None, port: int | None = None,
                 identity_file: str | None = None, jump_host: str | None = None, known_hosts: str | None = None):
        self.ssh_config_path = ssh_config if ssh_config is not None else default_ssh_config()
        self._config_named = ssh_config is not None or bool(os.environ.get(SSH_CONFIG_ENV))
        self.user = user
        self.port = port
        self.identity_file = identity_file
        self.jump_host = jump_host
        self.known_hosts = known_hosts
        self._lock = threading.Lock()
        self._config: Any = None

    def resolve(self, host: str) -> SSHTarget:
        """Apply the SSH config and the runner's settings to ``host``."""
        return self._resolve(host, self.jump_host, depth=0)

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
                self._config = _IndexedConfig(paramiko.SSHConfig.from_text(_config_text(path))
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
            raise NodeFailure(ErrorKind.CONFIG, f"ssh config {self.ssh_config_path}: {exc}") from None
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


def _with_jump(target: SSHTarget, jump: SSHTarget) -> SSHTarget:
    return SSHTarget(**{**target.__dict__, "jump": jump})


INCLUDE_FILES = 256          # files one ssh config may pull in with Include, all together
INCLUDE_BYTES = 16 * 2**20   # and their text, all together


def _config_text(path: Path, depth: int = 0, budget: list[int] | None = None) -> str:
    """The config with its ``Include`` lines replaced by the files they name (paramiko
    ignores Include; OpenSSH reads relative names from ~/.ssh and expands globs).

    Bounded in depth (16 files deep) and in total (:data:`INCLUDE_FILES` reads,
    :data:`INCLUDE_BYTES` of text): files that each include the next several times would
    otherwise be read an exponential number of times."""
    import glob

    if depth > 16:
        raise ValueError(f"Include nested deeper than 16 files at {path}")
    budget = [INCLUDE_FILES, INCLUDE_BYTES] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        raise ValueError(f"Include pulls in more than {INCLUDE_FILES} files in all (at {path})")
    text = path.read_text()
    budget[1] -= len(text)
    if budget[1] < 0:
        raise ValueError(f"Include pulls in more than {INCLUDE_BYTES // 2**20} MiB of text in all (at {path})")
    out = []
    for line in text.splitlines():
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
                    out.append(_config_text(Path(name), depth + 1, budget))
    return "\n".join(out) + "\n"


class _IndexedConfig:
    """paramiko's SSHConfig, looked up through an index of its ``Host`` stanzas.

    paramiko tries every stanza for every host; a config with one ``Host`` stanza per node
    (4,096 of them) then costs milliseconds per host, for every host.  Stanzas whose patterns
    are all plain names are indexed by name; the others (wildcards, negations) are tried as
    before, and the lookup runs on the stanzas that may match, in file order, so the answer
    is paramiko's.  Configs with ``Match`` or canonicalisation are looked up as they are."""

    def __init__(self, config: Any):
        self._config = config
        stanzas: list[dict[str, Any]] = getattr(config, "_config", [])
        self._always: list[int] = []
        self._named: dict[str, list[int]] = {}
        self._indexed = all("matches" not in c and "canonicalizehostname" not in c.get("config", {})
                            for c in stanzas)
        for i, stanza in enumerate(stanzas):
            patterns = stanza.get("host", [])
            patterns = patterns.split(",") if isinstance(patterns, str) else patterns
            if any(ch in p for p in patterns for ch in "*?[!"):
                self._always.append(i)
            else:
                for p in patterns:
                    self._named.setdefault(p, []).append(i)

    def lookup(self, name: str) -> Any:
        if not self._indexed:
            return self._config.lookup(name)
        import copy

        stanzas = self._config._config
        view = copy.copy(self._config)  # the same config, fewer stanzas to try
        view._config = [stanzas[i] for i in sorted(self._always + self._named.get(name, []))]
        return view.lookup(name)


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

    if not isinstance(paramiko.config.getpass, _CachedGetpass):  # type: ignore[attr-defined]  # not in the stubs
        paramiko.config.getpass = _CachedGetpass(getpass.getuser())  # type: ignore[attr-defined]  # as above
