"""Host keys and private keys for the SSH runner.

known_hosts is read as OpenSSH reads it for host key checking (plain, hashed and wildcard
patterns, ``@revoked``); :class:`HostKeyPolicy` refuses unknown and changed keys, or stores
unknown ones with accept-new; :class:`PrivateKeys` loads each identity file once per run.
paramiko is imported lazily.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import ErrorKind, NodeFailure

if TYPE_CHECKING:
    import paramiko


class HostKeyPolicy:
    """The known_hosts files of a run (each parsed once) and the checks made against them."""

    def __init__(self, *, accept_new: bool, warn: Callable[[str], None]):
        self.accept_new = accept_new
        self._warn = warn
        self._lock = threading.Lock()
        self._known: dict[str, KnownHosts] = {}

    def known_types(self, path: str, name: str) -> list[str]:
        """The key types ``path`` holds for host ``name`` (empty when it has none)."""
        db = self._db(path)
        with self._lock:
            entry = db.lookup(name)
        return list(entry) if entry else []

    def _db(self, path: str) -> KnownHosts:
        with self._lock:
            db = self._known.get(path)
            if db is None:
                db = KnownHosts()
                if os.path.isfile(path):
                    try:
                        db.load(path)
                    except (OSError, UnicodeDecodeError) as exc:
                        raise NodeFailure(ErrorKind.CONFIG, f"cannot read known_hosts {path}: {exc}") from None
                    for note in db.warnings:
                        self._warn(note)
                self._known[path] = db
            return db

    def check(self, name: str, path: str, key: paramiko.PKey) -> None:
        """Raise the node's failure unless ``key`` is the one ``path`` knows for ``name``."""
        db = self._db(path)
        if db.is_revoked(key):  # before accept-new: a revoked key is never learnt
            raise NodeFailure(ErrorKind.HOSTKEY_CHANGED,
                              f"host key of {name} ({key.get_name()} {key.fingerprint}) is marked @revoked "
                              f"in {path}: refusing")
        with self._lock:  # lookup and accept-new together: two threads must not both append
            entry = db.lookup(name)
            if entry is None:
                if not self.accept_new:
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


class PrivateKeys:
    """Identity files, each loaded once per run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[str, Any] = {}

    def load(self, path: str) -> Any:
        """A private key; a str saying why not when it is unusable."""
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


def pub_blob(private_path: str) -> bytes | None:
    """The public key blob of ``private_path`` (from its ``.pub``), to match agent keys."""
    import base64
    import binascii

    try:
        fields = Path(private_path + ".pub").read_text().split()
        return base64.b64decode(fields[1]) if len(fields) >= 2 else None
    except (OSError, binascii.Error, UnicodeDecodeError):
        return None
