"""Slurm queries that fail while a real job runs on the testbed.

``squeue``, ``sacct`` and ``scontrol`` are replaced by stand-ins (named so: the fault is the
point) that print what slurm-wlm 22.05's clients print when the controller is too busy, when
authentication fails, or are missing altogether. ``scancel`` and the job are the real ones, so
a cancel through the outage is checked against Slurm's own verdict.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit.scheduler.records import load_record

from .conftest import CK

# stand-in body per fault, for squeue, sacct and scontrol alike
FAULTS = {
    "busy-timeout": 'echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1',
    "munge-auth": 'echo "${0##*/}: error: Munge decode failed: Invalid credential" >&2; '
                  'echo "slurm_load_jobs error: Protocol authentication error" >&2; exit 1',
    "bad-config": 'echo "${0##*/}: error: Invalid user for SlurmUser slurm, ignored" >&2; '
                  'echo "${0##*/}: fatal: Unable to process configuration file" >&2; exit 1',
    "vanished": None,  # no such command at all
}
EXPECTED = {
    "busy-timeout": "slurm_load_jobs error: Socket timed out on send/recv operation",
    "munge-auth": "slurm_load_jobs error: Protocol authentication error",
    "bad-config": "squeue: fatal: Unable to process configuration file",
    "vanished": "squeue: command not found",
}


def _faulty_env(cli: CK, tmp_path: Path, fault: str) -> dict[str, str]:
    """The CLI's environment with broken query commands and the real sbatch/scancel/srun.

    PATH holds only a directory of our own (the stand-ins, links to the real submit and cancel
    commands) and Python's: /usr/bin (or /bin, merged into it) would bring the real squeue back.
    """
    bin_dir = tmp_path / f"bin-{fault}"
    bin_dir.mkdir()
    for real in ("sbatch", "scancel", "srun"):
        (bin_dir / real).symlink_to(shutil.which(real) or real)
    body = FAULTS[fault]
    if body is not None:
        for name in ("squeue", "sacct", "scontrol"):
            (bin_dir / name).write_text(f"#!/bin/sh\n# stand-in for Slurm's {name}: {fault}\n{body}\n")
            (bin_dir / name).chmod(0o755)
    env = cli.env()
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent)])
    return env


@pytest.fixture
def running_job(cli: CK) -> Iterator[str]:
    proc = cli("submit", "--site", "testbed", "--gpus-per-node", "1", "--launcher", "srun", "--no-wait",
               "--out", str(cli.runs / "sleeper"), "--", "sleep", "300")
    assert proc.returncode == 0, proc.stderr
    job = re.search(r"Submitted job (\d+)", proc.stdout).group(1)  # type: ignore[union-attr]
    cli.wait_for(job, lambda s: s["state"] == "RUNNING")
    yield job
    cli.bed.run("scancel", job, check=False)


def test_status_under_query_faults_is_unknown_never_lost(cli: CK, tmp_path: Path, running_job: str) -> None:
    (path,) = cli.records()
    before = path.read_bytes()
    for fault in FAULTS:
        env = _faulty_env(cli, tmp_path, fault)
        res = cli("status", "--all", "--json", env=env, timeout=120)
        assert res.returncode == 3, (fault, res.stderr)
        (row,) = json.loads(res.stdout)["jobs"]
        assert (row["job_id"], row["state"], row["stale"]) == (running_job, "UNKNOWN", True), fault
        assert res.stderr == (f"clusterkit: warning: cannot reach Slurm controller: {EXPECTED[fault]}; "
                              "Slurm jobs show their last known state, marked stale\n"), fault
        human = cli("status", running_job, env=env, timeout=120)
        assert human.returncode == 3 and human.stdout.startswith(f"job {running_job} UNKNOWN (stale)"), fault
        assert path.read_bytes() == before, f"{fault}: a stale state was written into the record"
    assert cli.status(running_job)["state"] == "RUNNING"  # and Slurm, asked again, agrees it never ended


def test_cancel_through_a_busy_controller_reaches_the_real_scancel(cli: CK, tmp_path: Path, running_job: str) -> None:
    res = cli("cancel", running_job, env=_faulty_env(cli, tmp_path, "busy-timeout"), timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"Cancelled job {running_job} (was UNKNOWN).\n"
    st = cli.wait_for(running_job, lambda s: s["state"] == "CANCELLED", what="Slurm's CANCELLED")
    assert st["stale"] is False
    (path,) = cli.records()
    assert load_record(path).cancel_requested
