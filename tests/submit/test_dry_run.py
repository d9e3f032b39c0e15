"""``submit --dry-run`` contacts no node: it prints the script even when every node is down."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from ..conftest import REPO

SITE = """\
name: dry
scheduler: {kind: slurm, partition: debug, time: "00:05:00"}
nodes: {nodelist: node1, gpus_per_node: 1, cpus_per_node: 2, mem_gb: 4}
ssh: {port: PORT, connect_timeout_s: 2, command_timeout_s: 2}
preflight: {before_submit: true, transport: ssh}
"""


class Listener:
    """A TCP port on loopback standing in for the node's sshd: it only counts who connects."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()  # as a node whose sshd is broken: preflight would call it unreachable

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def _slurm_and_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """scontrol (a stand-in printing the testbed's captured answer: node1 is idle in partition
    debug) and an SSH config that sends node1 to the listener on loopback."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    captured = REPO / "tests" / "data" / "sites" / "slurm-22.05"
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\ncase "$2" in\n  partition) cat "{captured}/show-partition-o.txt";;\n'
                        f'  node) cat "{captured}/show-node-o.txt";;\n  *) exit 1;;\nesac\n')
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("Host node1\n  HostName 127.0.0.1\n")
    return {"CLUSTERKIT_SSH_CONFIG": str(ssh_config)}


def test_dry_run_runs_no_preflight_and_prints_the_script(ck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listener = Listener()
    env = _slurm_and_ssh(tmp_path, monkeypatch)
    try:
        site = tmp_path / "dry.yaml"
        site.write_text(SITE.replace("PORT", str(listener.port)))
        out = tmp_path / "run"
        res = ck("submit", "--site", str(site), "--dry-run", "--no-snapshot", "--out", str(out), "--", "python",
                 "train.py", env=env)
        # the control: a real submit's preflight does reach the node (and finds it broken)
        real = ck("submit", "--site", str(site), "--no-snapshot", "--out", str(tmp_path / "real"), "--", "python",
                  "train.py", env=env)
    finally:
        listener.close()
    assert res.code == 0, res.err
    assert res.out == (out / "job.sbatch").read_text() and res.out.startswith("#!/bin/bash")
    assert "dry run: preflight not run, so nodes it would exclude are not in #SBATCH --exclude above" in res.err
    assert real.code == 3 and listener.connections >= 1, real.err
    assert not (tmp_path / "real").exists()


def test_dry_run_says_nothing_about_preflight_where_none_would_run(ck, tmp_path: Path) -> None:
    res = ck("submit", "--site", "testbed", "--dry-run", "--out", str(tmp_path / "run"), "--", "true", cwd=REPO)
    assert res.code == 0 and "dry run: preflight" not in res.err
    assert "preflight in job no (site)" in res.err   # the choices say the job does not check either
