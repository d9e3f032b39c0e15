"""Host keys and private keys for the SSH runner.

known_hosts is read as OpenSSH reads it for host key checking (plain, hashed and wildcard
patterns, ``@revoked``); :class:`HostKeyPolicy` refuses unknown and changed keys, or stores
unknown ones with accept-new; :class:`PrivateKeys` loads each identity file once per run.
paramiko is imported lazily.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import operator
import os
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import ErrorKind, NodeFailure

if TYPE_CHECKING:
    import paramiko


class HostKeyPolicy:
    """The known_hosts files of a run (each parsed once into an index) and the checks made
    against them.  Lookups read the index without a lock; only accept-new, which appends to
    the file, is serialised."""

    def __init__(self, *, accept_new: bool, warn: Callable[[str], None]):
        self.accept_new = accept_new
        self._warn = warn
        self._lock = threading.Lock()       # loading files, and accept-new's append
        self._known: dict[str, KnownHosts] = {}

    def prepare(self, path: str, names: Iterable[str]) -> None:
        """Index the hashed entries of ``path`` for ``names`` in one pass (the run's hosts)."""
        self._db(path).prepare(names)

    def known_types(self, path: str, name: str) -> list[str]:
        """The key types ``path`` holds for host ``name`` (empty when it has none)."""
        entry = self._db(path).lookup(name)
        return list(entry) if entry else []

    def _db(self, path: str) -> KnownHosts:
        db = self._known.get(path)
        if db is not None:
            return db
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
        entry = db.lookup(name)
        if entry is None:
            if not self.accept_new:
                raise NodeFailure(ErrorKind.HOSTKEY_UNKNOWN,
                                  f"host key of {name} ({key.get_name()} {key.fingerprint}) "
                                  f"is not in {path}; verify it, or use --accept-new-host-keys")
            with self._lock:  # look again and append together: two threads must not both append
                entry = db.lookup(name)
                if entry is None:
                    _append_known_host(path, name, key)
                    db.add(name, key.get_name(), key)
                    return
        if entry.get(key.get_name()) != key:
            raise NodeFailure(ErrorKind.HOSTKEY_CHANGED,
                              f"host key of {name} differs from {path} (now {key.get_name()} "
                              f"{key.fingerprint}): refusing; possible man-in-the-middle or a "
                              f"reinstalled node")


_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


class _Hashed:
    """One ``|1|salt|hash`` pattern: HMAC-SHA1 keyed by the salt, its two pad states
    precomputed (one HMAC then costs two C hash copies: measured 0.9-1.1 us, against 2.8 us
    for ``hmac.digest``, which sets the digest up again on every call)."""

    __slots__ = ("digest", "inner", "outer")

    def __init__(self, salt: bytes, digest: bytes):
        key = salt.ljust(64, b"\0") if len(salt) <= 64 else hashlib.sha1(salt).digest().ljust(64, b"\0")
        self.inner = hashlib.sha1(key.translate(_IPAD))
        self.outer = hashlib.sha1(key.translate(_OPAD))
        self.digest = digest

    def hmac_of(self, name: bytes) -> bytes:
        inner = self.inner.copy()
        inner.update(name)
        outer = self.outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def matches(self, name: bytes) -> bool:
        return hmac.compare_digest(self.hmac_of(name), self.digest)

    def first_match(self, names: Sequence[bytes]) -> int | None:
        """The index of the first of ``names`` this entry hashes, or None.  The loop runs in
        C (``map`` and ``operator.indexOf``), stopping at the match."""
        try:
            return operator.indexOf(map(self.hmac_of, names), self.digest)
        except ValueError:
            return None


@dataclass
class _Line:
    """A known_hosts line that is not one plain name list: wildcards, negations or hashes
    mixed in.  Patterns are compiled once, at load."""

    number: int
    key: Any
    positive: list[Callable[[str, bytes], bool]]
    negative: list[Callable[[str, bytes], bool]]

    def matches(self, name: str, raw: bytes) -> bool:
        """OpenSSH's rule: some pattern matches and no negated ('!') pattern does."""
        if any(m(name, raw) for m in self.negative):
            return False
        return any(m(name, raw) for m in self.positive)


class KnownHosts:
    """known_hosts as OpenSSH reads it, as far as host key checking goes: plain, hashed and
    wildcard (``*``, ``?``, ``!``) patterns, ``@revoked`` keys refused.  Lines that cannot be
    used (``@cert-authority``: paramiko checks no certificates; unknown key types; malformed
    lines) are skipped with a warning instead of failing every host.

    Parsed once into an index: plain names (``host`` and ``[host]:port``) in a dict, wildcard
    and negated patterns compiled once, hashed entries as precomputed HMAC states.  A lookup
    reads the index without a lock.  Where several entries give a key of one type, the first
    in the file counts, as before the index."""

    def __init__(self) -> None:
        self._plain: dict[str, list[tuple[int, Any]]] = {}   # lower-case name -> (line, key)
        self._lines: list[_Line] = []                         # wildcards, negations, mixed
        self._hashed: list[tuple[int, Any, _Hashed]] = []     # one hashed name per line
        self._prepared: dict[str, list[tuple[int, Any]]] = {}  # name -> hashed entries it matched
        self._cache: dict[str, dict[str, Any] | None] = {}
        self._revoked: set[tuple[str, bytes]] = set()
        self._count = 0
        self.warnings: list[str] = []

    def load(self, path: str) -> None:
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                problem = self._line(line.strip(), number)
                if problem:
                    self.warnings.append(f"{path}:{number}: {problem}; line skipped")
        self._cache.clear()

    def _line(self, line: str, number: int = 0) -> str | None:
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
            self._revoked.add((entry.key.get_name(), entry.key.asbytes()))
        else:
            self._index(list(entry.hostnames), entry.key, number)
        return None

    def _index(self, patterns: Sequence[str], key: Any, number: int) -> None:
        self._count += 1
        if all(not _is_special(p) for p in patterns):
            for p in patterns:
                self._plain.setdefault(p.lower(), []).append((number, key))
            return
        if len(patterns) == 1 and patterns[0].startswith("|1|"):
            hashed = _hashed(patterns[0])
            if hashed is not None:
                self._hashed.append((number, key, hashed))
            return
        line = _Line(number, key, [], [])
        for p in patterns:
            negated = p.startswith("!")
            matcher = _matcher(p[1:] if negated else p)
            if matcher is not None:
                (line.negative if negated else line.positive).append(matcher)
        self._lines.append(line)

    def prepare(self, names: Iterable[str]) -> None:
        """Match every hashed entry against ``names`` once, ahead of their lookups.

        A hashed entry names exactly one host, so each entry stops at its first match.  Each
        entry is tried first against the host the previous entry matched (ssh writes one line
        per key type of a host, one after another), then against the hosts no entry has
        matched yet, starting after the previous match (known_hosts grows in the order hosts
        were contacted, which makes a file written in host order linear), then against the
        rest.  In a shuffled file an entry finds its host, on average, halfway through the
        hosts still unmatched: n * n / 4 HMACs for n hosts of one entry each."""
        todo = [n for n in dict.fromkeys(names) if n not in self._prepared]
        if not todo:
            return
        found: dict[bytes, list[tuple[int, Any]]] = {}
        pending = [n.encode() for n in todo]   # no entry has matched these yet
        matched: list[bytes] = []              # most recently matched last
        at = 0                                 # where the search of ``pending`` starts
        for number, key, hashed in self._hashed:
            if matched and hashed.matches(matched[-1]):
                found[matched[-1]].append((number, key))
                continue
            order = pending[at:] + pending[:at] if at else pending
            i = hashed.first_match(order) if order else None
            if i is not None:
                i = (i + at) % len(pending)
                raw = pending.pop(i)
                matched.append(raw)
                found[raw] = [(number, key)]
                at = i if i < len(pending) else 0
                continue
            i = hashed.first_match(matched[-2::-1]) if len(matched) > 1 else None
            if i is not None:
                found[matched[-2 - i]].append((number, key))
        for name in todo:
            self._cache.pop(name, None)
            self._prepared[name] = found.get(name.encode(), [])

    def lookup(self, name: str) -> dict[str, Any] | None:
        """The keys known for ``name`` by key type (None when there are none)."""
        if name in self._cache:
            return self._cache[name]
        hits = list(self._plain.get(name.lower(), ()))
        raw = name.encode()
        hits += [(line.number, line.key) for line in self._lines if line.matches(name, raw)]
        prepared = self._prepared.get(name)
        if prepared is not None:
            hits += prepared
        else:
            hits += [(number, key) for number, key, hashed in self._hashed if hashed.matches(raw)]
        found: dict[str, Any] = {}
        for _, key in sorted(hits, key=lambda hit: hit[0]):
            found.setdefault(key.get_name(), key)
        result = found or None
        self._cache[name] = result  # (two threads may both compute it: the same answer)
        return result

    def add(self, name: str, keytype: str, key: Any) -> None:
        self._count += 1
        self._plain.setdefault(name.lower(), []).append((1 << 62, key))  # after every line read
        self._cache.pop(name, None)

    def is_revoked(self, key: Any) -> bool:
        return (key.get_name(), key.asbytes()) in self._revoked

    def __len__(self) -> int:
        """How many entries (not @revoked) were indexed."""
        return self._count


def _is_special(pattern: str) -> bool:
    return pattern.startswith(("!", "|")) or "*" in pattern or "?" in pattern


def _hashed(pattern: str) -> _Hashed | None:
    parts = pattern.split("|")  # "", "1", salt, hash
    if len(parts) != 4:
        return None
    try:
        return _Hashed(base64.b64decode(parts[2], validate=True), base64.b64decode(parts[3], validate=True))
    except binascii.Error:
        return None


def _matcher(pattern: str) -> Callable[[str, bytes], bool] | None:
    """One pattern, compiled once: a hash, a wildcard (case-insensitive), or a plain name."""
    if pattern.startswith("|1|"):
        hashed = _hashed(pattern)
        return None if hashed is None else (lambda _name, raw: hashed.matches(raw))
    if "*" in pattern or "?" in pattern:
        regex = re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern),
                           re.IGNORECASE | re.DOTALL)
        return lambda name, _raw: regex.fullmatch(name) is not None
    plain = pattern.lower()
    return lambda name, _raw: name.lower() == plain


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
