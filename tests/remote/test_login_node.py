"""From a laptop through a login node, against real sshd (the SSH lab): clusterkit runs on the
"login node" (an sshd serving this machine's Python with the checkout on PYTHONPATH, HOME of its
own, the local scheduler), the "laptop" is a separate HOME with its own ~/.ssh/config and
known_hosts, run in the lab's network namespace.  Submit, follow, status, cancel, doctor; the
job runs the code as it was at submit; ProxyJump through a second sshd; a changed or unknown
host key is refused; a login node that is down is exit 3."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CLI, REPO, assert_one_line_error
from tests.sshlab.lab import SFTP_SERVER, SSHLab

pytestmark = pytest.mark.torch   # the local site's launcher is torchrun

SCRIPT = """import pathlib
MARK = "{mark}"
print("marker", MARK, "from", pathlib.Path(__file__).resolve(), flush=True)
"""

# The login node's python: the machine's, clusterkit from the checkout, a home of its own.
PYTHON_WRAPPER = """#!/bin/sh
export HOME={home} CLUSTERKIT_STATE_DIR={home}/state CLUSTERKIT_SITES={home}/sites PYTHONPATH={toolkit}
export PATH={bindir}:$PATH
unset XDG_STATE_HOME XDG_CONFIG_HOME CLUSTERKIT_SSH_CONFIG
exec {python} "$@"
"""

PADDING = 15   # the lab serves 16 addresses per sshd: the jump host (the 17th) gets a second sshd


class Laptop:
    def __init__(self, lab: SSHLab, root: Path, ck: CLI):
        self.lab, self.root = lab, root
        self.home = root / "laptop"
        self.tree = root / "proj"
        self.sites = root / "laptop-sites"
        self.ck = ck.bind(process=True, cwd=self.tree, wrap=lab.wrap, timeout=240,
                          env={"HOME": str(self.home), "CLUSTERKIT_STATE_DIR": str(self.home / "state"),
                               "CLUSTERKIT_SSH_CONFIG": None, "SSH_AUTH_SOCK": None, "XDG_STATE_HOME": None})

    def site(self, name: str, **login: object) -> str:
        import yaml

        path = self.sites / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"extends": str(REPO / "site_configs" / "local.yaml"), "name": "lab",
                                        "login": {"site": "lab", **login}}))
        return str(path)


@pytest.fixture(scope="module")
def lab(sshlab_factory: Callable[..., SSHLab], tmp_path_factory: pytest.TempPathFactory) -> SSHLab:
    profiles = tmp_path_factory.mktemp("login-profiles")
    home = tmp_path_factory.mktemp("login-home")
    (profiles / "login" / "bin").mkdir(parents=True)
    wrapper = profiles / "login" / "bin" / "python3"
    wrapper.write_text(PYTHON_WRAPPER.format(home=home, toolkit=REPO / "toolkit", python=sys.executable,
                                           bindir=Path(sys.executable).parent))
    wrapper.chmod(0o755)
    sftp = profiles / "login" / "bin" / "sftp-server"   # SFTP's home is the login node's home too
    sftp.write_text(f"#!/bin/sh\ncd {home} && exec {SFTP_SERVER} -d {home}\n")
    sftp.chmod(0o755)
    (home / "sites").mkdir()
    (home / "sites" / "lab.yaml").write_text(
        f"extends: {REPO / 'site_configs' / 'local.yaml'}\nname: lab\nlogin: {{host: not-used-there}}\n")
    nodes = {"login": "login", **{f"pad{i:02d}": "login" for i in range(PADDING)}, "jump": "login", "down": "@refused"}
    made = sshlab_factory(nodes, profiles_dir=str(profiles))
    made.login_home = home   # type: ignore[attr-defined]
    return made


@pytest.fixture
def laptop(lab: SSHLab, tmp_path: Path, ck: CLI) -> Laptop:
    lt = Laptop(lab, tmp_path, ck)
    ssh = lt.home / ".ssh"
    ssh.mkdir(parents=True)
    lt.sites.mkdir()
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    a = lab.addresses
    (ssh / "config").write_text("\n".join([
        f"Host cluster-login\n    HostName {a['login']}",
        f"Host cluster-bad-key\n    HostName {a['login']}\n    UserKnownHostsFile {ssh / 'bad_known_hosts'}",
        f"Host cluster-new-key\n    HostName {a['login']}\n    UserKnownHostsFile {ssh / 'new_known_hosts'}",
        f"Host jumpbox\n    HostName {a['jump']}",
        f"Host cluster-down\n    HostName {a['down']}",
        f"Host *\n    Port {lab.port}\n    User root\n    IdentityFile {lab.identity}\n    IdentitiesOnly yes", ""]))
    (ssh / "known_hosts").write_text("".join(f"[{a[h]}]:{lab.port} {lab.host_key_line}\n" for h in ("login", "jump")))
    wrong = " ".join(Path(f"{other}.pub").read_text().split()[:2])
    (ssh / "bad_known_hosts").write_text(f"[{a['login']}]:{lab.port} {wrong}\n")
    lt.tree.mkdir()
    (lt.tree / "train.py").write_text(SCRIPT.format(mark="as-submitted"))
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"]):
        subprocess.run(["git", "-C", str(lt.tree), "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
                       check=True, capture_output=True)
    return lt


def _job(out: str) -> str:
    for line in out.splitlines():
        if line.startswith("Submitted job "):
            return line.split()[2]
    raise AssertionError(out)


def _state(laptop: Laptop, job: str) -> dict[str, object]:
    res = laptop.ck("status", job, "--json")
    assert res.code == 0, res.err
    return json.loads(res.out)   # type: ignore[no-any-return]


def test_submit_follow_status_doctor_and_the_code_as_it_was(laptop: Laptop, lab: SSHLab) -> None:
    site = laptop.site("lab", host="cluster-login")
    gate = laptop.root / "gate"
    sub = laptop.ck("submit", "--site", site, "--gpus-per-node", "1",
                    "--setup", f"while [ ! -e {gate} ]; do sleep 0.1; done", "--", "python", "train.py")
    assert sub.code == 0, sub.err
    assert "through the login node cluster-login" in sub.out and "1 file(s) sent" in sub.out, sub.out
    job = _job(sub.out)
    (laptop.tree / "train.py").write_text(SCRIPT.format(mark="edited-later"))   # the job waits at the gate
    assert _state(laptop, job)["state"] in ("PENDING", "RUNNING")
    follow = laptop.ck.popen("logs", job, "--follow")
    gate.touch()
    out, err = follow.communicate(timeout=180)
    assert follow.returncode == 0, err
    assert "marker as-submitted" in out and "edited-later" not in out, out
    st = _state(laptop, job)
    assert st["state"] == "COMPLETED", st
    home = lab.login_home   # type: ignore[attr-defined]
    assert str(st["run_dir"]).startswith(f"{home}/.clusterkit/upload/checkouts/")
    # the laptop's record: the cluster's job id and the login node it went through
    rec = json.loads(next((laptop.home / "state" / "remote").glob(f"*-lab-{job}.json")).read_text())
    assert rec["login"]["host"] == "cluster-login" and rec["code"]["dirty"] is False
    latest = laptop.ck("status", "--json")   # no JOB: the newest job, submitted through the login node
    assert latest.code == 0 and json.loads(latest.out)["job_id"] == job, latest.err
    doc = laptop.ck("doctor", job)   # the laptop has no job record of its own: doctor ran on the login node
    assert doc.code == 0 and "ok: the job completed" in doc.out, (doc.out, doc.err)
    # the same tree again: nothing sent twice
    again = laptop.ck("submit", "--site", site, "--gpus-per-node", "1", "--", "python", "train.py")
    assert again.code == 0 and "1 file(s) sent" in again.out, again.out   # train.py changed: one new object
    third = laptop.ck("submit", "--site", site, "--gpus-per-node", "1", "--", "python", "train.py")
    assert third.code == 0 and "0 file(s) sent" in third.out, third.out


def test_cancel_through_the_login_node(laptop: Laptop) -> None:
    site = laptop.site("lab", host="cluster-login")
    gate = laptop.root / "never"
    sub = laptop.ck("submit", "--site", site, "--gpus-per-node", "1",
                    "--setup", f"while [ ! -e {gate} ]; do sleep 0.1; done", "--", "python", "train.py")
    assert sub.code == 0, sub.err
    job = _job(sub.out)
    res = laptop.ck("cancel", job)
    assert res.code == 0, res.err
    deadline = time.monotonic() + 60
    while (st := _state(laptop, job))["state"] in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, st
        time.sleep(0.2)
    assert st["state"] == "CANCELLED", st


def test_proxy_jump_through_a_second_sshd(laptop: Laptop, lab: SSHLab) -> None:
    jump_log = lab.sshd_logs()[1]   # the jump host's own sshd
    before = jump_log.read_text().count("Accepted publickey")
    site = laptop.site("lab", host="cluster-login", proxy_jump="jumpbox")
    res = laptop.ck("submit", "--site", site, "--gpus-per-node", "1", "--dry-run", "--", "python", "train.py")
    assert res.code == 0, res.err
    assert "export CK_CODE_DIR=" in res.out
    assert jump_log.read_text().count("Accepted publickey") > before


def test_host_keys_as_preflight_checks_them(laptop: Laptop) -> None:
    bad = laptop.ck("submit", "--site", laptop.site("bad", host="cluster-bad-key"), "--dry-run", "--",
                    "python", "train.py")
    assert_one_line_error(bad, 3, "login node cluster-bad-key", "differs from", "refusing")
    new = laptop.site("new", host="cluster-new-key")
    unknown = laptop.ck("submit", "--site", new, "--dry-run", "--", "python", "train.py")
    assert_one_line_error(unknown, 3, "is not in", "--accept-new-host-keys")
    ok = laptop.ck("submit", "--site", new, "--dry-run", "--accept-new-host-keys", "--", "python", "train.py")
    assert ok.code == 0, ok.err
    assert laptop.lab.host_key_line in (laptop.home / ".ssh" / "new_known_hosts").read_text()


def test_a_login_node_down_is_exit_3_and_one_without_clusterkit_one_line(laptop: Laptop) -> None:
    down = laptop.ck("submit", "--site", laptop.site("down", host="cluster-down"), "--", "python", "train.py")
    assert_one_line_error(down, 3, "login node cluster-down", "connection refused")
    bare = laptop.ck("submit", "--site", laptop.site("bare", host="cluster-login", python="/nonexistent/python3"),
                     "--", "python", "train.py")
    assert_one_line_error(bare, 1, "clusterkit is not installed on the login node cluster-login")
