"""Submission faults on the Slurm testbed: sbatch refusing, many submits at once, status cost,
and slurmctld down (last: it stops and restarts the controller)."""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from clusterkit.records import RecordStore, SlurmQuery, load_record

from .conftest import CK

# A site that claims more than the testbed has, so that sbatch (not clusterkit) must refuse.
BIG_SITE = """\
name: testbed-big
scheduler: {kind: slurm, partition: debug, time: "00:05:00"}
nodes: {nodelist: "node[1-8]", gpus_per_node: 16, cpus_per_node: 8, mem_gb: 62}
network: {fabric: ethernet, socket_ifname: lo}
storage:
  - {path: /tmp, type: local, shared: true, use: [data, checkpoints]}
preflight: {before_submit: false}   # its node names exist only inside Slurm
"""


@pytest.fixture
def big_site(tmp_path: Path) -> Path:
    path = tmp_path / "testbed-big.yaml"
    path.write_text(BIG_SITE)
    return path


@pytest.mark.parametrize("args, reason", [
    (["--site", "testbed", "--set", "partition=nope"], "Invalid partition name specified"),
    # 1 of 16 GPUs asks for its share (1 CPU): Slurm then refuses on the node count itself
    (["--site", "{big}", "--stage", "multi-node", "--nodes", "6", "--gpus-per-node", "1"],
     "Node count specification invalid"),
    (["--site", "{big}", "--gpus-per-node", "9"], "Requested node configuration is not available"),
], ids=["bad-partition", "too-many-nodes", "too-many-gpus"])
def test_sbatch_refusal_is_one_line_with_slurms_reason(cli: CK, big_site: Path, args: list[str], reason: str) -> None:
    args = [a.replace("{big}", str(big_site)) for a in args]
    proc = cli("submit", *args, "--launcher", "srun", "--out", str(cli.runs / "refused"), "--", "true")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr == f"clusterkit: error: sbatch refused the job: {reason}\n"
    assert cli.records() == []
    assert not list((cli.runs / "refused").glob(".submission_file_*"))


def test_twenty_parallel_submits_give_twenty_intact_records(cli: CK) -> None:
    def one(i: int) -> subprocess.CompletedProcess[str]:
        return cli("submit", "--site", "testbed", "--gpus-per-node", "1", "--launcher", "srun",
                   "--job-name", f"par{i}", "--out", str(cli.runs / f"par{i}"), "--json", "--", "true")

    with ThreadPoolExecutor(max_workers=20) as pool:
        procs = list(pool.map(one, range(20)))
    assert [p.returncode for p in procs] == [0] * 20, [p.stderr for p in procs if p.returncode]
    printed = {json.loads(p.stdout)["job_id"] for p in procs}
    records = [load_record(p) for p in cli.records()]
    assert len(records) == 20 and {r.job_id for r in records} == printed
    assert sorted(r.job_name for r in records) == sorted(f"par{i}" for i in range(20))
    assert not list((cli.state_dir / "jobs").glob(".*"))  # no temp files left behind
    # status of all twenty: one squeue, one sacct, one scontrol (sacct fails: no slurmdbd)
    os.environ["SLURM_CONF"] = str(cli.bed.slurm_conf)
    try:
        query = SlurmQuery()
        states = query.states(r.job_id for r in records)
    finally:
        del os.environ["SLURM_CONF"]
    assert [c[0] for c in query.calls] == ["squeue", "sacct", "scontrol"]
    assert set(states) == printed
    table = cli("status", "--limit", "50", "--json")
    assert table.returncode == 0
    assert {j["job_id"] for j in json.loads(table.stdout)["jobs"]} == printed


def test_status_uses_sacct_where_there_is_one(cli: CK) -> None:
    cli.with_sacct = True  # the testbed's sacct stand-in first on PATH
    proc = cli("submit", "--site", "testbed", "--gpus-per-node", "1", "--launcher", "srun", "--wait",
               "--out", str(cli.runs / "acct"), "--", "bash", "-c", "exit 4")
    assert proc.returncode == 4, proc.stderr
    env = cli.env()
    query = SlurmQuery(run=lambda argv, t: subprocess.run(list(argv), capture_output=True, text=True,
                                                          timeout=t, env=env))
    (rec,) = [load_record(p) for p in cli.records()]
    st = query.states([rec.job_id])[rec.job_id]
    assert [c[0] for c in query.calls] == ["squeue", "sacct"]
    assert (st.state, st.exit_code) == ("FAILED", 4)


def test_unknown_job_is_lost_not_waited_for(cli: CK) -> None:
    """A record whose job Slurm never heard of (and no result file): LOST, at once."""
    store = RecordStore(cli.state_dir / "jobs")
    proc = cli("submit", "--site", "testbed", "--gpus-per-node", "1", "--launcher", "srun",
               "--out", str(cli.runs / "real"), "--", "true")
    (rec,) = [load_record(p) for p in cli.records()]
    ghost = rec.model_copy(update={"job_id": "999999999", "submitted_at": "2020-01-01T00:00:00.000000Z",
                                   "run_dir": str(cli.runs / "nowhere")})
    store.save(ghost)
    assert proc.returncode == 0
    st = cli.status("999999999")
    assert st["state"] == "LOST" and "unknown to Slurm" in st["reason"]


def test_slurmctld_down_is_a_clear_error_and_records_stay(cli: CK) -> None:
    first = cli("submit", "--site", "testbed", "--gpus-per-node", "1", "--launcher", "srun", "--wait",
                "--out", str(cli.runs / "before"), "--", "true")  # ended before the controller goes
    assert first.returncode == 0
    before = {p.name: p.read_bytes() for p in cli.records()}
    cli.bed.stop_controller()
    try:
        proc = cli("submit", "--site", "testbed", "--gpus-per-node", "1", "--launcher", "srun",
                   "--out", str(cli.runs / "down"), "--", "true")
        assert proc.returncode == 1
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("clusterkit: error: cannot reach Slurm controller"), lines
        assert {p.name: p.read_bytes() for p in cli.records()} == before
    finally:
        cli.bed.start_controller()
    st = cli.status(json.loads(next(iter(before.values())))["job_id"])
    assert (st["state"], st["exit_code"]) == ("COMPLETED", 0)
