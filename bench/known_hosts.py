"""known_hosts lookups at cluster scale: clusterkit's index next to paramiko's HostKeys and
OpenSSH's ``ssh-keygen -F``, on the same files, in one run.

Files of 4,096 entries (``--hosts``), one per host, written as ``ssh`` does (plain) and as
``ssh-keygen -H`` does (hashed: one random 20-byte salt per line), in host order (how
known_hosts grows) and shuffled.  clusterkit loads the file, indexes it for the run's hosts
(as SSHRunner does before connecting) and looks every host up.  paramiko's
``HostKeys.lookup`` and ``ssh-keygen -F`` scan the file per lookup, so they are timed on a
sample of hosts (``--sample``) and shown per lookup; their whole-run figure is that times the
host count (printed as an estimate, marked ``~``).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat


def _key_line() -> str:
    pub = ed25519.Ed25519PrivateKey.generate().public_key()
    return pub.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()


def _hashed(name: str) -> str:
    salt = os.urandom(20)
    digest = hmac.digest(salt, name.encode(), hashlib.sha1)
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def write_file(path: Path, names: list[str], *, hashed: bool, shuffled: bool) -> None:
    keys = [_key_line() for _ in range(16)]
    order = list(range(len(names)))
    if shuffled:
        random.Random(1).shuffle(order)
    path.write_text("".join(f"{_hashed(names[i]) if hashed else names[i]} {keys[i % 16]}\n" for i in order))


def time_clusterkit(path: Path, names: list[str]) -> tuple[float, int]:
    import paramiko  # noqa: F401  (imported before the clock starts, as for paramiko's row)

    from clusterkit.nodes.transport.ssh_keys import KnownHosts

    t0 = time.perf_counter()
    db = KnownHosts()
    db.load(str(path))
    db.prepare(names)
    found = sum(db.lookup(n) is not None for n in names)
    return time.perf_counter() - t0, found


def time_paramiko(path: Path, sample: list[str]) -> tuple[float, int]:
    import paramiko

    t0 = time.perf_counter()
    db = paramiko.HostKeys(str(path))
    found = sum(db.lookup(n) is not None for n in sample)
    return time.perf_counter() - t0, found


def time_ssh_keygen(path: Path, sample: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    found = 0
    for name in sample:
        proc = subprocess.run(["ssh-keygen", "-F", name, "-f", str(path)], capture_output=True)
        found += proc.returncode == 0
    return time.perf_counter() - t0, found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=4096)
    ap.add_argument("--sample", type=int, default=64, help="lookups timed for paramiko and ssh-keygen")
    args = ap.parse_args(argv)
    names = [f"gpu{i:04d}.cluster" for i in range(args.hosts)]
    sample = random.Random(2).sample(names, min(args.sample, len(names)))
    load0 = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    rows = []
    with tempfile.TemporaryDirectory(prefix="ck-bench-kh-") as tmp:
        for label, hashed, shuffled in (("plain", False, False), ("hashed", True, False),
                                        ("hashed, shuffled", True, True)):
            path = Path(tmp) / "known_hosts"
            write_file(path, names, hashed=hashed, shuffled=shuffled)
            ck, ck_found = time_clusterkit(path, names)
            pk, pk_found = time_paramiko(path, sample)
            sk, sk_found = time_ssh_keygen(path, sample)
            rows.append((label, ck, ck_found, pk, pk_found, sk, sk_found))
            print(f"  {label}: clusterkit {ck:.2f} s", file=sys.stderr, flush=True)
    load1 = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    n, k = args.hosts, len(sample)
    print(f"known_hosts of {n} entries, every host looked up; load average before: {load0}, after: {load1}")
    head = (f"{'file':17} {'clusterkit s':>12} {'found':>6} {'paramiko s/lookup':>18} {'~all':>8} "
            f"{'ssh-keygen -F s/lookup':>22} {'~all':>8}")
    print(head)
    print("-" * len(head))
    for label, ck, ck_found, pk, pk_found, sk, sk_found in rows:
        assert ck_found == n and pk_found == k and sk_found == k, (label, ck_found, pk_found, sk_found)
        print(f"{label:17} {ck:12.3f} {ck_found:6} {pk / k:18.4f} {pk / k * n:8.0f} {sk / k:22.4f} {sk / k * n:8.0f}")
    print(f"(paramiko and ssh-keygen timed on {k} lookups; '~all' is that rate times {n})")
    plain, hashed = rows[0][1], rows[1][1]
    print(f"goals: plain {plain:.2f} s (<= 1 s: {'met' if plain <= 1 else 'missed'}), "
          f"hashed {hashed:.2f} s (<= 10 s: {'met' if hashed <= 10 else 'missed'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
