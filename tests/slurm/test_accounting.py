"""Jobs slurmctld has forgotten: only Slurm's accounting (slurmdbd on MariaDB, the real sacct) knows them.

The session's testbed keeps finished jobs in slurmctld's memory for an hour (MinJobAge=3600), so
its tests read squeue and sacct side by side.  This module starts a one-node testbed of its own
with MinJobAge=2: a job that ended leaves the controller's memory within a minute or so, and
``status`` must still tell how it ended, from sacct alone.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit.scheduler.records import RecordStore, load_record

from .conftest import CK, TESTBED, Testbed, _free_port_block, read_env_file


@pytest.fixture(scope="module")
def forgetful(testbed: Testbed) -> Iterator[Testbed]:
    """A second testbed: one node, slurmctld forgets a finished job after 2 s."""
    lab = Path(tempfile.mkdtemp(prefix="clusterkit-slurmlab-forget-"))
    lab.chmod(0o755)
    env = dict(os.environ, SLURMLAB_DIR=str(lab), SLURMLAB_NODES="1", SLURMLAB_MIN_JOB_AGE="2",
               SLURMLAB_PORT=str(_free_port_block(2)), SLURMLAB_FIRST_JOB_ID=str(random.randrange(1000, 60000) * 1000))
    env.pop("SLURM_CONF", None)
    proc = subprocess.run(["bash", str(TESTBED)], env=env, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        pytest.fail(f"second testbed did not start:\n{proc.stderr[-2000:]}")
    try:
        yield Testbed(lab=lab, slurm_conf=lab / "etc" / "slurm.conf", exports=read_env_file(lab / "testbed.env"),
                      nodes=["node1"])
    finally:
        subprocess.run(["bash", str(TESTBED), "--stop"], env=env, capture_output=True, text=True, timeout=120)
        shutil.rmtree(lab, ignore_errors=True)


def test_status_of_a_job_the_controller_forgot_comes_from_sacct(cli: CK, forgetful: Testbed) -> None:
    env = cli.env(SLURM_CONF=str(forgetful.slurm_conf))
    proc = cli("submit", "--site", "testbed", "--gpus-per-node", "1", "--launcher", "srun", "--wait",
               "--out", str(cli.runs / "forgotten"), "--", "bash", "-c", "exit 3", env=env)
    assert proc.returncode == 3, proc.stderr
    (rec,) = [load_record(p) for p in cli.records()]
    deadline = time.monotonic() + 150
    while True:  # slurmctld purges old jobs on its own schedule
        sq = forgetful.run("squeue", "-h", "--states=all", "-j", rec.job_id, "-o", "%T", check=False)
        if sq.returncode != 0 and "Invalid job id" in sq.stderr:
            break
        assert time.monotonic() < deadline, f"slurmctld still knows job {rec.job_id}: {sq.stdout}{sq.stderr}"
        time.sleep(1)
    assert forgetful.run("scontrol", "-o", "show", "job", rec.job_id, check=False).returncode != 0
    # status asks Slurm afresh: no cached end in the record, no result file left by the job
    fresh = rec.model_copy(update={"state": None, "exit_code": None, "signal": None, "reason": None})
    RecordStore(cli.state_dir / "jobs").save(fresh)
    rec.result_file.unlink()
    proc = cli("status", rec.job_id, "--json", env=env)
    assert proc.code == 0, proc.err
    got = json.loads(proc.out)
    assert (got["state"], got["exit_code"], got["source"]) == ("FAILED", 3, "sacct"), got
    # where accounting is off, the forgotten job is gone for good: no result file, so LOST
    RecordStore(cli.state_dir / "jobs").save(fresh)
    proc = cli("status", rec.job_id, "--json", env=cli.env(SLURM_CONF=str(forgetful.no_accounting_conf())))
    assert proc.code == 0, proc.err
    assert json.loads(proc.out)["state"] == "LOST", proc.out


def _ours(lab: Path) -> list[str]:
    """Processes started for the testbed at ``lab`` (its marker in their environment)."""
    marker = f"SLURMLAB_DIR={lab}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker in (d / "environ").read_bytes().split(b"\0"):
                    found.append(f"{d.name} {(d / 'comm').read_text().strip()}")
            except OSError:  # gone meanwhile, or a kernel thread
                continue
    return found


def test_stop_leaves_nothing_running_or_listening(forgetful: Testbed) -> None:
    """``testbed.sh --stop``: no process, namespace, cgroup or listener of that testbed is left."""
    conf = dict(line.split("=", 1) for line in forgetful.slurm_conf.read_text().splitlines() if "=" in line)
    ports = [int(conf["SlurmctldPort"]), int(conf["AccountingStoragePort"])]
    names = [forgetful.ctl_netns, *(forgetful.netns(n) for n in forgetful.nodes)]
    cgroups = [c for c in (forgetful.cgroup(n) for n in forgetful.nodes) if c]
    assert len(_ours(forgetful.lab)) >= 6  # munged, mariadbd, slurmdbd, slurmctld, slurmd, the forwarder
    assert all(Path("/run/netns", n).exists() for n in names) and all(c.is_dir() for c in cgroups)
    proc = subprocess.run(["bash", str(TESTBED), "--stop"], env=dict(os.environ, SLURMLAB_DIR=str(forgetful.lab)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert _ours(forgetful.lab) == []
    assert not any(Path("/run/netns", n).exists() for n in names)
    assert not any(c.exists() for c in cgroups)
    for port in ports:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, port  # refused: nothing listens
