"""A 4-node job submitted from a "laptop" through a login node to the Slurm testbed: the login
node is a real sshd (the SSH lab's, on this machine's loopback, where the testbed's Slurm
clients work) serving clusterkit with this checkout; the laptop is a HOME of its own with its own
~/.ssh/config and known_hosts.  The job is held while the laptop's script changes, then
released: it runs the script as submitted on all 4 nodes; logs --follow, status, doctor and
cancel run through the login node."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CLI, REPO
from tests.sshlab.lab import SFTP_SERVER, SSHLab, lab_unavailable_reason, start_lab

from .conftest import CK

SCRIPT = 'import os\nprint("marker {mark} rank", os.environ["SLURM_PROCID"], flush=True)\n'

PYTHON = """#!/bin/sh
export HOME={home} CLUSTERKIT_STATE_DIR={home}/state PYTHONPATH={toolkit} SLURM_CONF={conf} PATH={bindir}:$PATH
exec {python} "$@"
"""


@pytest.fixture
def login(cli: CK, tmp_path: Path) -> Iterator[tuple[SSHLab, Path]]:
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
    # on this machine's loopback (no namespace of the lab's own): the testbed's clients work here
    lab = start_lab({"login": "login"}, tmp_path / "lab", profiles_dir=tmp_path / "profiles", use_netns=False)
    try:
        yield lab, home
    finally:
        lab.stop()


def test_a_four_node_job_from_a_laptop(cli: CK, login: tuple[SSHLab, Path], tmp_path: Path) -> None:
    lab, home = login
    laptop = tmp_path / "laptop"
    (laptop / ".ssh").mkdir(parents=True)
    (laptop / ".ssh" / "config").write_text(
        f"Host cluster-login\n    HostName {lab.addresses['login']}\n    Port {lab.port}\n    User root\n"
        f"    IdentityFile {lab.identity}\n    IdentitiesOnly yes\n")
    (laptop / ".ssh" / "known_hosts").write_text(f"[{lab.addresses['login']}]:{lab.port} {lab.host_key_line}\n")
    site = tmp_path / "cluster.yaml"
    site.write_text(f"extends: {REPO / 'site_configs' / 'testbed.yaml'}\nlogin: {{host: cluster-login}}\n")
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "train.py").write_text(SCRIPT.format(mark="as-submitted"))
    ck = CLI(cwd=tree, process=True, timeout=240,
             env={"HOME": str(laptop), "CLUSTERKIT_STATE_DIR": str(laptop / "state"), "SLURM_CONF": None,
                  "CLUSTERKIT_SSH_CONFIG": None, "SSH_AUTH_SOCK": None, "XDG_STATE_HOME": None})

    def submit() -> str:
        res = ck("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "4", "--gpus-per-node", "1",
                 "--launcher", "srun", "--sbatch", "hold", "--code", str(tree), "--", "python", "train.py")
        assert res.code == 0, res.out + res.err
        m = re.search(r"Submitted job (\d+) through the login node cluster-login", res.out)
        assert m, res.out
        return m.group(1)

    def state(job: str) -> dict[str, object]:
        res = ck("status", job, "--json")
        assert res.code == 0, res.err
        return json.loads(res.out)   # type: ignore[no-any-return]

    job = submit()
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
        other = submit()   # a second held job: cancelled from the laptop
        assert ck("cancel", other).code == 0
        assert state(other)["state"] == "CANCELLED"
    finally:   # a failure must not leave a held job in the queue for the next tests
        for j in (job, other):
            if j:
                cli.bed.run("scancel", j, check=False)
