"""A lab of virtual SSH nodes on one machine: real sshd processes on loopback addresses.

Each virtual node is one loopback address (``127.1.K.J``) served by a real ``sshd`` with a
generated host key and key-only auth.  ``sshd`` takes at most 16 ``ListenAddress`` lines, so
the lab starts one ``sshd`` per 16 nodes.  A node is told apart by the address it was reached
on: the ``ForceCommand`` wrapper reads the third field of ``SSH_CONNECTION``, finds the node's
directory and runs the original command with bash, with

* ``PATH=<node>/bin:$PATH``            (the profile's fake ``nvidia-smi``, ``ibstat``, ...)
* ``CLUSTERKIT_SYSROOT=<node>/root``   (a private copy of the profile's ``root/`` tree)
* ``CLUSTERKIT_LAB_NODE=<name>``       (the node's name, for tests that want to see it)

Profiles live in ``tests/sshlab/profiles/<name>/{bin,root}``.  Three special "profiles" make
fault addresses instead of nodes: ``@refused`` (nothing listens: connection refused),
``@tarpit`` (accepts TCP, never sends the SSH banner) and ``@blackhole`` (a listener whose
accept queue is full, so SYNs are dropped and a client without a connect timeout waits for
the kernel's SYN retries).

Everything runs inside a network namespace of the lab's own (``ck-lab-<random>``) when the
kernel lets us create one; otherwise on the host's loopback (127.0.0.0/8 only, never another
address) on a random port.  ``start_lab(..., netns=NAME, addresses=..., port=...)`` runs the
sshd in an existing namespace instead (the Slurm testbed's login node), serving the addresses
given (they must exist there); that namespace is not the lab's to delete.  Clients under test
run inside the namespace via :meth:`SSHLab.run` / :meth:`SSHLab.wrap`.  :meth:`SSHLab.stop`
stops every process the lab started, by pid, and deletes the lab's own namespace.

What the lab writes (keys, configs, the node wrapper, node directories): ``lab_files.py``.

Command line (for poking at it by hand, from the repository's root)::

    python -m tests.sshlab.lab --nodes 16 [--profile NAME] [--refused 1] [--tarpit 1]
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.sshlab.lab_files import FAULT_SERVER, SFTP_SERVER, LabError, _prepare_files, _sshd_config

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
REFUSED, TARPIT, BLACKHOLE = "@refused", "@tarpit", "@blackhole"
FAULTS = (REFUSED, TARPIT, BLACKHOLE)
NETNS_PORT = 2300  # fixed inside our own namespace: nothing else can hold it there
SSHD = "/usr/sbin/sshd"
PER_SSHD = 16  # sshd: "Too many listen sockets" past 16 ListenAddress lines

def lab_unavailable_reason() -> str | None:
    """Why the lab cannot run on this machine, or None when it can."""
    if os.geteuid() != 0:
        return "the SSH lab needs root (sshd, network namespaces)"
    if not Path(SSHD).exists():
        return f"the SSH lab needs {SSHD} (Debian package openssh-server)"
    if shutil.which("ssh-keygen") is None:
        return "the SSH lab needs ssh-keygen (Debian package openssh-client)"
    return None


@dataclass
class SSHLab:
    """A running lab.  Create with :func:`start_lab`; stop with :meth:`stop`."""

    workdir: Path
    netns: str | None
    port: int
    addresses: dict[str, str]          # node or fault name -> loopback address
    profiles: dict[str, str]           # name -> profile (or @refused/@tarpit/@blackhole)
    ssh_config: Path
    known_hosts: Path
    identity: Path
    host_key_line: str                 # "ssh-ed25519 AAAA..." of every node
    pids: list[int] = field(default_factory=list)
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)
    stopped: bool = False
    owns_netns: bool = True     # False: a namespace given to start_lab, left as it was found
    log_level: str = "VERBOSE"  # sshd's; VERBOSE logs each connection with the address it hit

    @property
    def hosts(self) -> list[str]:
        """Every name in the lab (nodes and fault addresses), in the order given."""
        return list(self.addresses)

    @property
    def nodes(self) -> list[str]:
        """The names served by sshd (not the fault addresses)."""
        return [h for h in self.addresses if self.profiles[h] not in FAULTS]

    def hosts_with(self, profile: str) -> list[str]:
        """Names whose profile (or fault kind) is ``profile``."""
        return [h for h, p in self.profiles.items() if p == profile]

    def node_dir(self, host: str) -> Path:
        """The directory of a virtual node (``bin`` and ``root`` inside)."""
        return self.workdir / "nodes" / host

    def sshd_logs(self) -> list[Path]:
        """The log files of the lab's sshd processes."""
        return sorted(self.workdir.glob("sshd-*.log"))

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed so that it runs inside the lab's namespace."""
        if self.netns is None:
            return list(argv)
        return ["ip", "netns", "exec", self.netns, *argv]

    def env(self, **extra: str) -> dict[str, str]:
        """An environment for clients under test: the lab's ssh config, no agent."""
        env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
        env["CLUSTERKIT_SSH_CONFIG"] = str(self.ssh_config)
        env.update(extra)
        return env

    def run(self, argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` inside the lab (``subprocess.run`` keywords; env defaults to env())."""
        kw.setdefault("env", self.env())
        return subprocess.run(self.wrap(argv), **kw)

    def popen(self, argv: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside the lab (``subprocess.Popen`` keywords), SIGINT handled by
        default whatever this runner's; caller reaps it."""
        kw.setdefault("env", self.env())
        kw.setdefault("preexec_fn", _default_sigint)
        return subprocess.Popen(self.wrap(argv), **kw)

    def stop(self) -> None:
        """Stop every process the lab started (by pid) and delete its namespace."""
        if self.stopped:
            return
        self.stopped = True
        for pid in self.pids:
            _signal_if_ours(pid, signal.SIGTERM, self.workdir)
        deadline = time.monotonic() + 3
        for pid in self.pids:
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            _signal_if_ours(pid, signal.SIGKILL, self.workdir)
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)
        _kill_sessions(self.workdir)
        if self.netns and self.owns_netns:
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
        _RUNNING.discard(self)  # type: ignore[arg-type]

    def __hash__(self) -> int:
        return id(self)

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary (what the command line prints)."""
        return {
            "workdir": str(self.workdir), "netns": self.netns, "port": self.port,
            "ssh_config": str(self.ssh_config), "known_hosts": str(self.known_hosts),
            "identity": str(self.identity), "pids": self.pids,
            "addresses": self.addresses, "profiles": self.profiles,
        }


_RUNNING: set[SSHLab] = set()


@atexit.register
def _stop_all() -> None:
    for lab in list(_RUNNING):
        lab.stop()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _signal_if_ours(pid: int, sig: int, workdir: Path) -> None:
    """Signal ``pid`` only if its command line names our workdir (pids get reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return
    if str(workdir).encode() in cmdline:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _kill_sessions(workdir: Path) -> None:
    """Kill what remote commands left running (a hung check's ``sleep``): sshd does not end
    a session's processes when the client goes away.  They are ours if their environment
    carries a sysroot under our workdir (the node wrapper exports it)."""
    marker = f"CLUSTERKIT_SYSROOT={workdir}/".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def _make_netns() -> str | None:
    """Create and bring up a namespace of our own; None where the kernel says no."""
    if shutil.which("ip") is None:
        return None
    name = f"ck-lab-{secrets.token_hex(4)}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        return None
    up = subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"],
                        capture_output=True)
    if up.returncode != 0:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        return None
    return name


def _free_port(addr: str) -> int:
    """A port free on the host's loopback (fallback mode only)."""
    with socket.socket() as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


def _assign_addresses(names: Sequence[str], profiles: Mapping[str, str]) -> dict[str, str]:
    """Nodes on 127.1.K.J, fault addresses on 127.2/127.3/127.4 (all loopback)."""
    out: dict[str, str] = {}
    counters = {"node": 0, REFUSED: 0, TARPIT: 0, BLACKHOLE: 0}
    nets = {"node": 1, REFUSED: 2, TARPIT: 3, BLACKHOLE: 4}
    for name in names:
        kind = profiles[name] if profiles[name] in FAULTS else "node"
        i = counters[kind]
        counters[kind] += 1
        out[name] = f"127.{nets[kind]}.{i // 250}.{i % 250 + 1}"
    return out


def _start_sshds(lab: SSHLab) -> None:
    """Start one daemonizing sshd per 16 nodes; each is listening once its parent exits."""
    nodes = lab.nodes
    starts = []
    for i in range(0, len(nodes), PER_SSHD):
        conf = _sshd_config(lab.workdir, i // PER_SSHD, lab.port,
                            [lab.addresses[n] for n in nodes[i:i + PER_SSHD]], lab.log_level)
        log = lab.workdir / f"sshd-{i // PER_SSHD}.log"
        starts.append((subprocess.Popen(lab.wrap([SSHD, "-f", str(conf), "-E", str(log)]),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
                       lab.workdir / f"sshd-{i // PER_SSHD}.pid", log))
    for proc, pidfile, log in starts:
        _, err = proc.communicate(timeout=20)
        if proc.returncode != 0:
            raise LabError(f"sshd failed to start: {err.decode(errors='replace').strip()} "
                           f"{log.read_text(errors='replace') if log.exists() else ''}")
        lab.pids.append(_wait_pidfile(pidfile))


def _wait_pidfile(path: Path, timeout: float = 5.0) -> int:
    """The daemon writes its pid file just after the parent exits: wait for it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text.isdigit():
            return int(text)
        time.sleep(0.005)
    raise LabError(f"sshd wrote no pid file {path}")


def _start_faults(lab: SSHLab) -> None:
    tarpits = [lab.addresses[h] for h in lab.hosts_with(TARPIT)]
    holes = [lab.addresses[h] for h in lab.hosts_with(BLACKHOLE)]
    if not tarpits and not holes:
        return
    script = lab.workdir / "fault_server.py"
    script.write_text(FAULT_SERVER)
    proc = subprocess.Popen(lab.wrap([sys.executable, str(script), str(lab.port),
                                      ",".join(tarpits), ",".join(holes)]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lab._procs.append(proc)
    lab.pids.append(proc.pid)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"ready":
        raise LabError(f"fault server failed: {proc.stderr.read().decode(errors='replace')}")  # type: ignore[union-attr]


def start_lab(nodes: Mapping[str, str], workdir: Path | str, *,
              profiles_dir: Path | str = PROFILES_DIR, use_netns: bool = True,
              log_level: str = "VERBOSE", netns: str | None = None,
              addresses: Mapping[str, str] | None = None, port: int | None = None) -> SSHLab:
    """Start a lab serving ``nodes`` (``{name: profile}``) under ``workdir`` (must be empty).

    Profiles name directories of ``profiles_dir``; ``@refused``, ``@tarpit`` and
    ``@blackhole`` make fault addresses.  ``log_level`` is sshd's (``DEBUG1`` also logs
    ``direct-tcpip`` forwarding, ``ERROR`` keeps a benchmark quiet).  ``netns``: run in this
    existing namespace (not deleted by :meth:`SSHLab.stop`) rather than one of the lab's own;
    ``addresses`` (``{name: address}``, every name) and ``port`` replace the lab's loopback
    addresses and port.  Raises LabError if sshd cannot be started.
    """
    reason = lab_unavailable_reason()
    if reason:
        raise LabError(reason)
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "addr").mkdir()
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    profiles = dict(nodes)
    if addresses is not None and set(addresses) != set(nodes):
        raise LabError(f"addresses name {sorted(addresses)}, the nodes are {sorted(nodes)}")
    addrs = {n: addresses[n] for n in nodes} if addresses is not None else _assign_addresses(list(nodes), profiles)
    owns = netns is None
    if owns:
        netns = _make_netns() if use_netns else None
    if port is None:
        port = NETNS_PORT if netns else _free_port("127.1.0.1")
    lab = SSHLab(workdir=workdir, netns=netns, port=port, owns_netns=owns,
                 addresses=addrs, profiles=profiles, ssh_config=workdir / "ssh_config",
                 known_hosts=workdir / "known_hosts", identity=workdir / "id_ed25519",
                 host_key_line="", log_level=log_level)
    _RUNNING.add(lab)
    try:
        _prepare_files(lab, Path(profiles_dir))
        _start_sshds(lab)
        _start_faults(lab)
    except BaseException:
        lab.stop()
        raise
    return lab


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--profile", default="_runner_echo")
    ap.add_argument("--prefix", default="node")
    for fault in ("refused", "tarpit", "blackhole"):
        ap.add_argument(f"--{fault}", type=int, default=0, help=f"number of @{fault} addresses")
    ap.add_argument("--workdir", help="default: a new temporary directory")
    ap.add_argument("--no-netns", action="store_true")
    ap.add_argument("--log-level", default="VERBOSE", help="sshd LogLevel")
    ap.add_argument("--hold", action="store_true", help="keep running until Ctrl-C, then stop")
    args = ap.parse_args(argv)
    width = max(3, len(str(args.nodes)))
    mapping = {f"{args.prefix}{i:0{width}d}": args.profile for i in range(1, args.nodes + 1)}
    for fault in ("refused", "tarpit", "blackhole"):
        mapping.update({f"{fault}{i:02d}": f"@{fault}" for i in range(1, getattr(args, fault) + 1)})
    workdir = args.workdir or tempfile.mkdtemp(prefix="sshlab-")
    t0 = time.monotonic()
    lab = start_lab(mapping, workdir, use_netns=not args.no_netns, log_level=args.log_level)
    info = lab.describe() | {"start_s": round(time.monotonic() - t0, 3)}
    print(json.dumps(info, indent=1), flush=True)
    if args.hold:
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
        lab.stop()
    return 0


if __name__ == "__main__":
    sys.exit(_main())


__all__ = [
    "BLACKHOLE",
    "PROFILES_DIR",
    "REFUSED",
    "SFTP_SERVER",
    "TARPIT",
    "LabError",
    "SSHLab",
    "lab_unavailable_reason",
    "start_lab",
]


def _default_sigint() -> None:
    """``preexec_fn``: SIGINT handled by default (a runner under ``nohup`` ignores it, and children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
