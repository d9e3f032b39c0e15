"""A site whose nodes rendezvous on another interface, and a teardown step, on the testbed (issue 40).

``network.rendezvous_host: {interface: eth0}``: the job script reads the head node's eth0 address
on that node (each testbed node is a network namespace with eth0 10.77.0.I), and torchrun's c10d
rendezvous on 2 nodes is held at that address; for a head that is not the batch host (a relaunch's)
the same script reads it in a one-task srun step on that node.  A ``--teardown`` step that fails runs after the
training and leaves Slurm's record of the job as the training ended: COMPLETED, exit 0.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

from .conftest import CK

pytest.importorskip("torch", reason="examples/allreduce.py needs torch (pip install torch, CPU build)")


def test_rendezvous_on_the_heads_interface_and_a_failing_teardown(cli: CK, tmp_path: Path) -> None:
    site = tmp_path / "ifsite.yaml"
    site.write_text(f"name: ifsite\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\n"
                    "network:\n  rendezvous_host: {interface: eth0}\n")
    marks = tmp_path / "marks"
    marks.mkdir(mode=0o777)
    run_dir = cli.runs / "rdzv-if"
    proc = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--launcher", "torchrun", "--out", str(run_dir), "--wait",
               "--setup", f'for h in $ck_allocation; do bash "$CK_RDZV_RESOLVE" "$h"; done > {marks}/each',
               "--teardown", f'echo "$CK_HEAD $CK_HEAD_NODE $CK_TRAINING_STATUS" > {marks}/td; exit 5',
               "--", "python", "examples/allreduce.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = re.search(r"Submitted job (\d+)", proc.stdout)[1]  # type: ignore[index]
    logs = "".join(p.read_text() for p in sorted((run_dir / "logs").glob("*.out")))
    assert "allreduce OK: world_size=2" in logs, logs[-3000:]
    address, head, status = (marks / "td").read_text().split()
    assert re.fullmatch(r"node\d+", head) and address == f"10.77.0.{head[4:]}" and status == "0"
    # each node's own address, read on it: here for the batch host, in an srun step for the other
    each = (marks / "each").read_text().split()
    assert len(set(each)) == 2 and address in each and all(re.fullmatch(r"10\.77\.0\.\d+", a) for a in each), each
    st = cli.status(job)
    assert (st["state"], st["exit_code"], st["teardown"]) == ("COMPLETED", 0, [{"step": 1, "status": 5}]), st
    shown = cli.bed.run("scontrol", "show", "job", job).stdout
    assert "JobState=COMPLETED" in shown and "ExitCode=0:0" in shown, shown
