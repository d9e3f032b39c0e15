"""What the SSH lab (``tests/sshlab/lab.py``) writes: the node wrapper sshd's ForceCommand runs,
the fault server, host and client keys, known_hosts, sshd's and the clients' configs, and one
directory per node from its profile."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.sshlab.lab import SSHLab

SFTP_SERVER = "/usr/lib/openssh/sftp-server"   # the sftp subsystem (ForceCommand runs the wrapper for it)

# The ForceCommand.  Runs under the login shell (bash) for every session; kept to builtins
# because it costs server CPU on every one of hundreds of logins.
WRAPPER = r"""#!/bin/bash
# sshlab ForceCommand: serve the virtual node reached at this address.
set -- $SSH_CONNECTION
node="@LAB@/addr/$3"
if [ ! -d "$node" ]; then
    echo "sshlab: no virtual node at address $3" >&2
    exit 255
fi
read -r CLUSTERKIT_LAB_NODE < "$node/name"
export CLUSTERKIT_LAB_NODE CLUSTERKIT_SYSROOT="$node/root" PATH="$node/bin:$PATH"
if [ -z "${SSH_ORIGINAL_COMMAND:-}" ]; then
    exec bash
fi
if [ "$SSH_ORIGINAL_COMMAND" = "@SFTP@" ]; then  # the sftp subsystem: the profile's own server, if it has one
    [ -x "$node/bin/sftp-server" ] && exec "$node/bin/sftp-server"
    exec @SFTP@
fi
exec bash -c "$SSH_ORIGINAL_COMMAND"
"""

# The fault server: tarpit addresses accept and hold connections without a word;
# black-hole addresses listen with a full accept queue so further SYNs are dropped.
FAULT_SERVER = r"""
import socket, sys, time
port = int(sys.argv[1])
tarpits = [a for a in sys.argv[2].split(",") if a]
holes = [a for a in sys.argv[3].split(",") if a]
listeners, held = [], []
for addr in tarpits:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port)); s.listen(1024); s.setblocking(False); listeners.append(s)
for addr in holes:
    s = socket.socket(); s.bind((addr, port)); s.listen(0); held.append(s)
    for _ in range(2):  # fill the (backlog 0 + 1) accept queue ourselves
        c = socket.socket(); c.setblocking(False); c.connect_ex((addr, port)); held.append(c)
print("ready", flush=True)
while True:
    for s in listeners:
        try:
            while True:
                held.append(s.accept()[0])
        except BlockingIOError:
            pass
    time.sleep(0.05)
"""


class LabError(RuntimeError):
    """The lab could not be started (a bug in the lab or in the machine, not in clusterkit)."""


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True)


def _make_node(workdir: Path, name: str, addr: str, profile: str, profiles_dir: Path) -> None:
    """A node directory: bin -> the profile's bin, root = a private copy of its root."""
    src = profiles_dir / profile
    if not src.is_dir():
        raise LabError(f"no such lab profile {profile!r} (looked in {profiles_dir})")
    node = workdir / "nodes" / name
    node.mkdir(parents=True)
    (node / "name").write_text(name + "\n")
    if (src / "bin").is_dir():
        (node / "bin").symlink_to(src / "bin")
    else:
        (node / "bin").mkdir()
    if (src / "root").is_dir():
        # cp -a, not shutil: profiles may hold FIFOs (a "hung" file), which copytree would open.
        subprocess.run(["cp", "-a", str(src / "root"), str(node / "root")], check=True)
    else:
        (node / "root").mkdir()
    (workdir / "addr" / addr).symlink_to(node)


def _sshd_config(workdir: Path, index: int, port: int, addrs: Sequence[str],
                 log_level: str) -> Path:
    """One sshd's config: key-only, no PAM, many concurrent logins, the node wrapper."""
    lines = [f"Port {port}", *(f"ListenAddress {a}" for a in addrs),
             f"HostKey {workdir}/host_ed25519", f"PidFile {workdir}/sshd-{index}.pid",
             f"AuthorizedKeysFile {workdir}/authorized_keys",
             "PubkeyAuthentication yes", "PasswordAuthentication no",
             "KbdInteractiveAuthentication no", "UsePAM no", "PermitRootLogin prohibit-password",
             "MaxStartups 1024", "MaxSessions 64", "UseDNS no", "StrictModes no",
             # Debian's bash sources ~/.bashrc for ssh commands unless SHLVL is set: +130 ms.
             "SetEnv SHLVL=1", f"ForceCommand {workdir}/node-wrapper", f"Subsystem sftp {SFTP_SERVER}",
             "AllowTcpForwarding yes", "X11Forwarding no", "PrintMotd no", "PrintLastLog no",
             f"LogLevel {log_level}"]
    path = workdir / f"sshd-{index}.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


def _client_config(lab: SSHLab) -> str:
    """An OpenSSH client config naming every lab host (honoured by ssh, clush, pdsh, clusterkit)."""
    out = []
    for name, addr in lab.addresses.items():
        out += [f"Host {name}", f"    HostName {addr}", ""]
    out += ["Host *", f"    Port {lab.port}", "    User root", f"    IdentityFile {lab.identity}",
            "    IdentitiesOnly yes", f"    UserKnownHostsFile {lab.known_hosts}",
            "    GlobalKnownHostsFile /dev/null", "    StrictHostKeyChecking yes",
            "    BatchMode yes", "    LogLevel ERROR", ""]
    return "\n".join(out)


def _prepare_files(lab: SSHLab, profiles_dir: Path) -> None:
    """Keys, known_hosts, client config, wrapper and node directories."""
    wd = lab.workdir
    _keygen(wd / "host_ed25519", "sshlab-host")
    _keygen(lab.identity, "sshlab-client")
    shutil.copy(f"{lab.identity}.pub", wd / "authorized_keys")
    key_type, key_b64 = (wd / "host_ed25519.pub").read_text().split()[:2]
    lab.host_key_line = f"{key_type} {key_b64}"
    lab.known_hosts.write_text("".join(
        f"[{addr}]:{lab.port} {lab.host_key_line}\n" for addr in lab.addresses.values()))
    lab.ssh_config.write_text(_client_config(lab))
    wrapper = wd / "node-wrapper"
    wrapper.write_text(WRAPPER.replace("@LAB@", str(wd)).replace("@SFTP@", SFTP_SERVER))
    wrapper.chmod(0o755)
    for name in lab.nodes:
        _make_node(wd, name, lab.addresses[name], lab.profiles[name], profiles_dir)
