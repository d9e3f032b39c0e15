"""known_hosts at cluster scale: the index answers as the per-line OpenSSH rules do.

No sshd needed: keys are generated here (ed25519 and ECDSA via cryptography, as ssh-keygen
makes them) and files are written the way ``ssh`` (plain) and ``ssh-keygen -H`` (hashed,
one random 20-byte salt per line) write them.  Correctness only; the lookup speed is
measured by ``bench/known_hosts.py``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import random
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from clusterkit.nodes.transport.ssh_keys import KnownHosts

N = 4096


def _public(private: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey) -> paramiko.PKey:
    typ, b64 = private.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode().split()[:2]
    return paramiko.PKey.from_type_string(typ, base64.b64decode(b64))


def _ed25519() -> paramiko.PKey:
    return _public(ed25519.Ed25519PrivateKey.generate())


def _ecdsa() -> paramiko.PKey:
    return _public(ec.generate_private_key(ec.SECP256R1()))


def _hash(name: str) -> str:
    salt = os.urandom(20)
    digest = hmac.digest(salt, name.encode(), hashlib.sha1)
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def _line(pattern: str, key: paramiko.PKey) -> str:
    return f"{pattern} {key.get_name()} {key.get_base64()}\n"


@pytest.fixture(scope="module")
def keys() -> list[paramiko.PKey]:
    return [_ed25519() for _ in range(8)]  # a few distinct keys, spread over the hosts


def _names(n: int) -> list[str]:
    # half on port 22 (plain name), half on another port ("[name]:port", as ssh writes them)
    return [f"gpu{i:04d}.cluster" if i % 2 else f"[gpu{i:04d}.cluster]:2222" for i in range(n)]


def _load(path: Path, text: str) -> KnownHosts:
    path.write_text(text)
    db = KnownHosts()
    db.load(str(path))
    assert db.warnings == []
    return db


# (entries, hashed, lookups prepared as the runner does, file in host order)
CASES = [(N, False, False, False), (N, False, True, False),
         (N, True, True, True),     # known_hosts grows in contact order; ssh-keygen -H keeps it
         (N, True, True, False),    # shuffled: each entry is tried against the unmatched hosts
         (512, True, False, False), (512, True, True, False)]  # any order: every HMAC is tried


@pytest.mark.parametrize(("n", "hashed", "prepared", "in_order"), CASES,
                         ids=["4096-plain", "4096-plain-prepared", "4096-hashed-prepared",
                              "4096-hashed-shuffled-prepared", "512-hashed-shuffled",
                              "512-hashed-shuffled-prepared"])
def test_every_host_finds_its_own_key(tmp_path: Path, keys: list[paramiko.PKey], n: int,
                                      hashed: bool, prepared: bool, in_order: bool) -> None:
    names = _names(n)
    order = list(range(n))
    if not in_order:
        random.Random(7).shuffle(order)
    db = _load(tmp_path / "known_hosts",
               "".join(_line(_hash(names[i]) if hashed else names[i], keys[i % 8]) for i in order))
    assert len(db) == n
    wanted = list(range(n))  # looked up in another order than the file's
    random.Random(8).shuffle(wanted)
    if prepared:  # as the runner does: the run's hosts in host-list order
        db.prepare(names)
    for i in wanted:
        assert db.lookup(names[i]) == {"ssh-ed25519": keys[i % 8]}, names[i]
    for absent in (f"gpu{n:04d}.cluster", "[gpu0001.cluster]:2222", "gpu0001.cluster.", "gpu000"):
        assert db.lookup(absent) is None, absent


@pytest.mark.parametrize("grouped", [True, False], ids=["key-types-together", "shuffled"])
def test_prepared_hashed_entries_with_several_key_types_and_strangers(
        tmp_path: Path, keys: list[paramiko.PKey], grouped: bool) -> None:
    """Hosts with one, two or no hashed entries (ssh writes one line per key type), entries of
    hosts outside the run, a host listed twice with one type: prepare() answers as the
    per-entry scan does, the first entry of a type winning."""
    names = [f"n{i:03d}" for i in range(96)]
    ecdsa = [_ecdsa() for _ in range(3)]
    lines: list[tuple[int, str, str, paramiko.PKey]] = []  # (host index, name, ...) in host order
    for i, name in enumerate(names):
        if i % 5 == 4:
            continue                                                 # not in the file
        lines.append((i, name, _hash(name), keys[i % 8]))
        if i % 3 == 0:
            lines.append((i, name, _hash(name), ecdsa[i % 3]))       # a second key type
        if i % 7 == 0:
            lines.append((i, name, _hash(name), keys[(i + 1) % 8]))  # same type again: shadowed
        if i % 4 == 0:
            lines.append((-1, f"other{i}", _hash(f"other{i}"), keys[0]))  # not in the run
    if not grouped:
        random.Random(3).shuffle(lines)
    text = "".join(_line(pattern, key) for _, _, pattern, key in lines)
    expected: dict[str, dict[str, paramiko.PKey]] = {}
    for i, name, _, key in lines:
        if i >= 0:
            expected.setdefault(name, {}).setdefault(key.get_name(), key)
    scanned = _load(tmp_path / "kh", text)
    prepared = _load(tmp_path / "kh", text)
    prepared.prepare(list(reversed(names)))
    for name in names:
        assert prepared.lookup(name) == scanned.lookup(name) == expected.get(name), name
    assert prepared.lookup("other0") == {"ssh-ed25519": keys[0]}  # not prepared: scanned


def test_hashed_lookups_match_paramiko_s_own_hash(tmp_path: Path, keys: list[paramiko.PKey]) -> None:
    salt = base64.b64encode(os.urandom(20)).decode()
    hashed = paramiko.HostKeys.hash_host("node7", salt)
    db = _load(tmp_path / "kh", _line(hashed, keys[0]))
    assert db.lookup("node7") == {"ssh-ed25519": keys[0]}
    assert db.lookup("node8") is None


def test_first_entry_of_a_type_wins_across_plain_wildcard_and_hashed_lines(
        tmp_path: Path, keys: list[paramiko.PKey]) -> None:
    ecdsa = _ecdsa()
    text = (_line("n1*.cluster", keys[1])         # line 1: wildcard, ed25519
            + _line(_hash("n10.cluster"), keys[2])  # line 2: hashed, ed25519 (shadowed by line 1)
            + _line("n10.cluster", keys[3])         # line 3: plain (shadowed)
            + _line(_hash("n10.cluster"), ecdsa))   # line 4: another type: counts
    for prepared in (False, True):
        db = _load(tmp_path / "kh", text)
        if prepared:
            db.prepare(["n10.cluster", "n11.cluster"])
        assert db.lookup("n10.cluster") == {"ssh-ed25519": keys[1], ecdsa.get_name(): ecdsa}
        assert list(db.lookup("n10.cluster") or {}) == ["ssh-ed25519", ecdsa.get_name()]
        assert db.lookup("n11.cluster") == {"ssh-ed25519": keys[1]}


def test_negations_exclude_as_openssh_does(tmp_path: Path, keys: list[paramiko.PKey]) -> None:
    db = _load(tmp_path / "kh", _line("*.cluster,!n13.cluster,!bad?.cluster", keys[0])
               + _line("n13.cluster", keys[1]) + _line(f"{_hash('n14.cluster')},!n14.cluster", keys[2]))
    assert db.lookup("n12.cluster") == {"ssh-ed25519": keys[0]}
    assert db.lookup("N12.Cluster") == {"ssh-ed25519": keys[0]}  # names match case-insensitively
    assert db.lookup("n13.cluster") == {"ssh-ed25519": keys[1]}  # only its own line
    assert db.lookup("bad1.cluster") is None
    assert db.lookup("n14.cluster") == {"ssh-ed25519": keys[0]}  # its hashed line negates it


def test_revoked_added_and_cached_answers(tmp_path: Path, keys: list[paramiko.PKey]) -> None:
    db = _load(tmp_path / "kh", f"@revoked * {keys[5].get_name()} {keys[5].get_base64()}\n"
               + _line("n1", keys[0]))
    assert db.is_revoked(keys[5]) and not db.is_revoked(keys[0])
    assert db.lookup("n2") is None  # cached as unknown...
    db.add("n2", "ssh-ed25519", keys[1])
    assert db.lookup("n2") == {"ssh-ed25519": keys[1]}  # ...until accept-new adds it
    db.add("n1", "ssh-ed25519", keys[2])
    assert db.lookup("n1") == {"ssh-ed25519": keys[0]}  # the file's entry still comes first


def test_a_hashed_entry_with_a_bad_salt_matches_nothing(tmp_path: Path, keys: list[paramiko.PKey]) -> None:
    db = _load(tmp_path / "kh", _line("|1|not*base64|AAAA", keys[0]) + _line("n1", keys[1]))
    db.prepare(["n1", "n2"])
    assert db.lookup("n1") == {"ssh-ed25519": keys[1]} and db.lookup("n2") is None

