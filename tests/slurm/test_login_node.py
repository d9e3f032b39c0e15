"""A 4-node job submitted from a "laptop" through a login node to the Slurm testbed.

The login node is a real sshd (the SSH lab's) running inside the testbed's controller namespace,
where the Slurm clients work (sbatch, squeue and srun reach slurmctld and the nodes from there),
serving clusterkit with this checkout.  This machine's own namespace reaches it over a veth pair
of the test's own (10.77.1.1 here, 10.77.1.2 on the login node, port 22).  The laptop is this
machine's namespace with a HOME of its own and its own ~/.ssh/config and known_hosts.  The job is
held while the laptop's script changes, then released: it runs the script as submitted on all 4
nodes; logs --follow, status and doctor run through the login node.  A second job goes through
a jump host (a second sshd, on this machine's loopback: its log shows the forwarding to the login
node) and is cancelled from the laptop.  A wrong host key is refused, and with the login node's
sshd stopped the laptop's status is exit 3.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import CLI, REPO, assert_one_line_error
from tests.sshlab.lab import SFTP_SERVER, SSHLab, lab_unavailable_reason, start_lab

from .conftest import CK

SCRIPT = 'import os\nprint("marker {mark} rank", os.environ["SLURM_PROCID"], flush=True)\n'

PYTHON = """#!/bin/sh
export HOME={home} CLUSTERKIT_STATE_DIR={home}/state PYTHONPATH={toolkit} SLURM_CONF={conf} PATH={bindir}:$PATH
exec {python} "$@"
"""


LAPTOP_ADDR, LOGIN_ADDR = "10.77.1.1", "10.77.1.2"   # a /30 of the test's own, beside the testbed's 10.77.0.0/24


@dataclass
class Login:
    node: SSHLab    # the login node's sshd, in the controller's namespace
    jump: SSHLab    # the jump host's, on this machine's loopback
    home: Path      # the login node's HOME


def _ip(*argv: str, check: bool = True) -> None:
    res = subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=10)
    assert res.returncode == 0 or not check, f"ip {' '.join(argv)}: {res.stderr}"


def _link_up(dev: str) -> bool:
    res = subprocess.run(["ip", "-o", "link", "show", "dev", dev], capture_output=True, text=True, timeout=10)
    return "LOWER_UP" in res.stdout


@contextmanager
def _veth_to(netns: str) -> Iterator[None]:
    """A veth pair from this namespace into ``netns``: LAPTOP_ADDR here, LOGIN_ADDR there.
    Deleting either end deletes both; the testbed deleting its namespace deletes it too."""
    here = netns.removesuffix("-ctl") + "-lap"   # named after the testbed's hash: ours alone
    _ip("link", "del", here, check=False)        # left by a run that was killed
    _ip("link", "add", here, "type", "veth", "peer", "name", "login0", "netns", netns)
    try:
        _ip("addr", "add", f"{LAPTOP_ADDR}/30", "dev", here)
        _ip("link", "set", here, "up")
        _ip("-n", netns, "addr", "add", f"{LOGIN_ADDR}/30", "dev", "login0")
        _ip("-n", netns, "link", "set", "login0", "up")
        deadline = time.monotonic() + 10
        while not _link_up(here):
            assert time.monotonic() < deadline, f"{here} did not come up"
            time.sleep(0.02)
        yield
    finally:
        _ip("link", "del", here, check=False)


@pytest.fixture
def login(cli: CK, tmp_path: Path) -> Iterator[Login]:
    reason = lab_unavailable_reason()
    if reason:
        pytest.skip(reason)
    home = tmp_path / "login-home"
    home.mkdir()
    bin_dir = tmp_path / "profiles" / "login" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").write_text(PYTHON.format(home=home, toolkit=REPO / "toolkit", conf=cli.bed.slurm_conf,
                                                   bindir=Path(sys.executable).parent, python=sys.executable))
    (bin_dir / "sftp-server").write_text(f"#!/bin/sh\ncd {home} && exec {SFTP_SERVER} -d {home}\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    with _veth_to(cli.bed.ctl_netns):
        node = start_lab({"login": "login"}, tmp_path / "lab", profiles_dir=tmp_path / "profiles",
                         netns=cli.bed.ctl_netns, addresses={"login": LOGIN_ADDR}, port=22)
        try:   # DEBUG1: the jump host's log names each forwarding's target
            jump = start_lab({"jump": "login"}, tmp_path / "jump", profiles_dir=tmp_path / "profiles",
                             use_netns=False, log_level="DEBUG1")
            try:
                yield Login(node, jump, home)
            finally:
                jump.stop()
        finally:
            node.stop()


def test_a_four_node_job_from_a_laptop(cli: CK, login: Login, tmp_path: Path) -> None:
    node, jump, home = login.node, login.jump, login.home
    laptop = tmp_path / "laptop"
    ssh = laptop / ".ssh"
    ssh.mkdir(parents=True)
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong = " ".join(Path(f"{other}.pub").read_text().split()[:2])
    (ssh / "config").write_text(
        f"Host cluster-login\n    HostName {LOGIN_ADDR}\n    Port {node.port}\n    User root\n"
        f"    IdentityFile {node.identity}\n    IdentitiesOnly yes\n"
        f"Host cluster-bad-key\n    HostName {LOGIN_ADDR}\n    User root\n    IdentityFile {node.identity}\n"
        f"    UserKnownHostsFile {ssh / 'bad_known_hosts'}\n"
        f"Host jumpbox\n    HostName {jump.addresses['jump']}\n    Port {jump.port}\n    User root\n"
        f"    IdentityFile {jump.identity}\n    IdentitiesOnly yes\n")
    (ssh / "known_hosts").write_text(f"{LOGIN_ADDR} {node.host_key_line}\n"
                                     f"[{jump.addresses['jump']}]:{jump.port} {jump.host_key_line}\n")
    (ssh / "bad_known_hosts").write_text(f"{LOGIN_ADDR} {wrong}\n")

    def site(name: str, login: str) -> str:
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"extends: {REPO / 'site_configs' / 'testbed.yaml'}\nlogin: {login}\n")
        return str(path)

    direct = site("cluster", "{host: cluster-login}")
    jumped = site("cluster-jump", "{host: cluster-login, proxy_jump: jumpbox}")
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "train.py").write_text(SCRIPT.format(mark="as-submitted"))
    ck = CLI(cwd=tree, process=True, timeout=240,
             env={"HOME": str(laptop), "CLUSTERKIT_STATE_DIR": str(laptop / "state"), "SLURM_CONF": None,
                  "CLUSTERKIT_SSH_CONFIG": None, "SSH_AUTH_SOCK": None, "XDG_STATE_HOME": None})

    def submit(site_file: str) -> str:
        res = ck("submit", "--site", site_file, "--stage", "multi-node", "--nodes", "4", "--gpus-per-node", "1",
                 "--launcher", "srun", "--sbatch", "hold", "--code", str(tree), "--", "python", "train.py")
        assert res.code == 0, res.out + res.err
        m = re.search(r"Submitted job (\d+) through the login node cluster-login", res.out)
        assert m, res.out
        return m.group(1)

    def state(job: str) -> dict[str, object]:
        res = ck("status", job, "--json")
        assert res.code == 0, res.err
        return json.loads(res.out)   # type: ignore[no-any-return]

    job = submit(direct)
    other = None
    try:
        st = state(job)
        assert st["state"] == "PENDING" and st["nodes"] == 4, st
        assert str(st["run_dir"]).startswith(f"{home}/.clusterkit/upload/checkouts/"), st
        (tree / "train.py").write_text(SCRIPT.format(mark="edited-while-queued"))
        cli.bed.run("scontrol", "release", job)
        follow = ck("logs", job, "--follow", timeout=180)
        assert follow.code == 0, follow.err
        assert sorted(re.findall(r"marker as-submitted rank (\d)", follow.out)) == ["0", "1", "2", "3"], follow.out
        assert "edited-while-queued" not in follow.out
        assert state(job)["state"] == "COMPLETED"
        doc = ck("doctor", job)
        assert doc.code == 0 and "ok" in doc.out, doc.out + doc.err
        # the login node's sshd is in the controller's namespace, and the laptop came in over the veth
        assert os.stat(f"/proc/{node.pids[0]}/ns/net").st_ino == os.stat(f"/run/netns/{cli.bed.ctl_netns}").st_ino
        assert f"from {LAPTOP_ADDR} port" in node.sshd_logs()[0].read_text()
        other = submit(jumped)   # a second held job, through the jump host: cancelled from the laptop
        assert ck("cancel", other).code == 0
        assert state(other)["state"] == "CANCELLED"
        jump_log = jump.sshd_logs()[0].read_text()
        assert "Accepted publickey" in jump_log and f"target {LOGIN_ADDR} port 22" in jump_log, jump_log[-2000:]
        bad = ck("submit", "--site", site("bad-key", "{host: cluster-bad-key}"), "--dry-run", "--code", str(tree),
                 "--", "python", "train.py")
        assert_one_line_error(bad, 3, "login node cluster-bad-key", "differs from", "refusing")
    finally:   # a failure must not leave a held job in the queue for the next tests
        for j in (job, other):
            if j:
                cli.bed.run("scancel", j, check=False)
    node.stop()   # the login node down: the laptop cannot reach it
    down = ck("status", job)
    assert_one_line_error(down, 3, "login node cluster-login", "connection refused")
