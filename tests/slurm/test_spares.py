"""The job chooses its nodes from its own preflight: hot spares, bad nodes excluded before launch.

Every node of the testbed runs the in-job preflight for real (an srun step inside the job's
allocation) with the SSH lab's fake GPU data: the healthy profile's ``nvidia-smi`` on every node
but the bad ones, which get the ``gpu_missing`` profile's (7 GPUs where the site says 8), so the
real ``gpu.count`` check fails there.  The training step is a real torchrun c10d rendezvous and
gloo all-reduce (examples/allreduce.py) on the nodes the job chose.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from .conftest import CK, NODES, REPO

pytest.importorskip("torch", reason="examples/allreduce.py needs torch (pip install torch, CPU build)")

PROFILES = REPO / "tests" / "sshlab" / "profiles"
# torchrun's --tee prefixes each line with the rank ("[rank3]: "); srun's and deepspeed's ranks print bare
RANK_LINE = re.compile(r"^(?:\[rank\d+\]: )?allreduce rank (\d+)/(\d+) on (\S+): sum=(\d+) expected=(\d+) ok$", re.M)


def _site(tmp_path: Path) -> Path:
    """The testbed site with the in-job preflight on (the shipped one keeps it off)."""
    data = yaml.safe_load((REPO / "site_configs" / "testbed.yaml").read_text())
    data["name"] = "testbed-spares"
    data["preflight"] = {"before_submit": False, "in_job": True}
    path = tmp_path / "testbed-spares.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _env(cli: CK, tmp_path: Path, bad: set[str]) -> dict[str, str]:
    """The job's environment: fake GPU data on every node, the gpu_missing profile's on ``bad``."""
    root = tmp_path / "sysroot"
    if not root.exists():
        shutil.copytree(PROFILES / "healthy" / "root", root)
        (root / "tmp").mkdir(mode=0o1777)   # the site's storage: /tmp and /, seen through the sysroot
    bin_dir = tmp_path / f"bin-{'-'.join(sorted(bad)) or 'none'}"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    cases = "|".join(sorted(bad)) or "none"
    missing, healthy = PROFILES / "gpu_missing" / "bin" / "nvidia-smi", PROFILES / "healthy" / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/bash\n# the testbed node's nvidia-smi: a profile of the SSH lab's, by Slurm node name\n"
                   f'case "${{SLURMD_NODENAME:-}}" in\n  {cases}) exec {missing} "$@" ;;\nesac\n'
                   f'exec {healthy} "$@"\n')
    smi.chmod(0o755)
    env = cli.env()
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    env["CLUSTERKIT_SYSROOT"] = str(root)
    return env


def _submit(cli: CK, site: Path, run_dir: Path, env: dict[str, str], *args: str):  # type: ignore[no-untyped-def]
    return cli("submit", "--site", str(site), "--stage", "multi-node", "--gpus-per-node", "1",
               "--launcher", "torchrun", *args, "--out", str(run_dir), "--wait", "--",
               "python", "examples/allreduce.py", env=env, timeout=300)


def _job_id(out: str) -> str:
    m = re.search(r"Submitted job (\d+)", out)
    assert m, out
    return m.group(1)


def _logs(run_dir: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").glob("*.out")))


def _selection(run_dir: Path, job: str, restart: int = 0) -> dict:
    return json.loads((run_dir / "logs" / f"nodes-{job}.r{restart}.json").read_text())


def test_a_spare_replaces_the_bad_node(cli: CK, tmp_path: Path) -> None:
    """--nodes N --spares 1 on N+1 nodes, one of them bad: the job launches on the other N."""
    site, run_dir = _site(tmp_path), cli.runs / "spares"
    wanted, bad = NODES - 1, "node2"
    proc = _submit(cli, site, run_dir, _env(cli, tmp_path, {bad}), "--nodes", str(wanted), "--spares", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _job_id(proc.stdout)
    assert f"#SBATCH --nodes={NODES}\n" in (run_dir / "job.sbatch").read_text()   # the N to launch on + 1 spare
    sel = _selection(run_dir, job)
    good = [f"node{i}" for i in range(1, NODES + 1) if f"node{i}" != bad]
    assert sel["outcome"] == "launch" and sel["chosen"] == good and sel["unused"] == []
    [dropped] = sel["dropped"]
    assert dropped["host"] == bad and dropped["verdict"] == "failed"
    assert "gpu.count" in dropped["reason"] and "7" in dropped["reason"], dropped
    logs = _logs(run_dir)
    ranks = RANK_LINE.findall(logs)
    assert sorted(int(r[0]) for r in ranks) == list(range(wanted))
    assert {r[2] for r in ranks} == set(good)
    assert f"allreduce OK: world_size={wanted}" in logs
    # the record shows the dropped node, and the next job keeps it out
    status = cli("status", job, timeout=60)
    assert status.code == 0, status.err
    assert re.search(rf"dropped: {bad} \(failed: .*gpu\.count", status.out), status.out
    again = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
                "--launcher", "torchrun", "--exclude-from", job, "--out", str(cli.runs / "again"), "--dry-run",
                "--", "python", "examples/allreduce.py", env=cli.env())
    assert again.code == 0, again.err
    assert f"#SBATCH --exclude={bad}\n" in (cli.runs / "again" / "job.sbatch").read_text()
    # the node history remembers the node the job dropped; with the site keeping out a node after
    # one hardware failure, the next job keeps it out by itself and says why
    nodes = cli("nodes", "--site", str(site), "--json", env=cli.env(), timeout=60)
    assert nodes.code == 0, nodes.err
    [seen] = json.loads(nodes.out)["nodes"]
    assert (seen["node"], seen["sources"], seen["jobs"], seen["verdicts"]) == (bad, ["in-job"], [job], {"gpu.count": 1})
    assert seen["recent_hardware"] == 1 and seen["kept_out"] is False        # the site's default is 3
    strict = tmp_path / "testbed-strict.yaml"
    strict.write_text(f"extends: {site}\nnode_history: {{exclude_after: 1}}\n")
    nxt = cli("render", "--site", str(strict), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
              "--launcher", "torchrun", "--out", str(cli.runs / "next"), "--", "python", "examples/allreduce.py",
              env=cli.env())
    assert nxt.code == 0, nxt.err
    assert f"#SBATCH --exclude={bad}\n" in (cli.runs / "next" / "job.sbatch").read_text()
    assert f"kept out: {bad} (node history)" in nxt.out
    assert f"node history: keeping {bad} out of the job (#SBATCH --exclude): {bad}: 1 hardware failure(s)" in nxt.err


def test_more_bad_nodes_than_spares_ends_before_training(cli: CK, tmp_path: Path) -> None:
    site, run_dir = _site(tmp_path), cli.runs / "too-few"
    proc = _submit(cli, site, run_dir, _env(cli, tmp_path, {"node2", "node3"}), "--nodes", str(NODES - 1),
                   "--spares", "1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    job = _job_id(proc.stdout)
    reason = (run_dir / f"{job}.reason").read_text()
    assert reason.startswith("preflight: 2 nodes failed, 1 spares: node2 (failed: "), reason
    assert "node3 (failed: " in reason
    assert _selection(run_dir, job)["outcome"] == "end"
    assert not RANK_LINE.search(_logs(run_dir)) and "clusterkit-launch" not in _logs(run_dir)   # no rank started
    status = cli("status", job, timeout=60).out
    assert "reason: preflight: 2 nodes failed, 1 spares: node2" in status and "  dropped: node3 (failed: " in status
    doctor = cli("doctor", job, timeout=120)
    assert doctor.code == 1, doctor.out + doctor.err
    assert doctor.out.startswith("bad-nodes: preflight: 2 nodes failed, 1 spares: node2 (failed: "), doctor.out
    assert "  dropped before launch: node2 (failed: gpu.count: " in doctor.out


def test_without_spares_the_job_requeues_itself_without_the_bad_node(cli: CK, tmp_path: Path) -> None:
    """Slurm gives the lowest nodes first: node1 is bad, so the first run gets it; the job requeues
    itself with node1 excluded (one restart) and its second run trains on two good nodes."""
    site, run_dir = _site(tmp_path), cli.runs / "requeue"
    proc = cli("submit", "--site", str(site), "--stage", "multi-node", "--gpus-per-node", "1", "--launcher",
               "torchrun", "--nodes", "2", "--out", str(run_dir), "--", "python", "examples/allreduce.py",
               env=_env(cli, tmp_path, {"node1"}), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _job_id(proc.stdout)
    try:
        st = cli.requeued_then_ended(job)
    finally:
        cli.bed.run("scancel", job, check=False)
    assert st["state"] == "COMPLETED", _logs(run_dir)[-4000:]
    first, second = _selection(run_dir, job, 0), _selection(run_dir, job, 1)
    assert first["outcome"] == "requeue" and first["exclude"] == ["node1"], first
    assert second["outcome"] == "launch" and "node1" not in second["allocation"], second
    ranks = RANK_LINE.findall(_logs(run_dir))
    assert {r[2] for r in ranks} == set(second["chosen"]) and len(ranks) == 2
    exc = cli.bed.run("scontrol", "-o", "show", "job", job).stdout
    assert "ExcNodeList=node1 " in exc and "Restarts=1 " in exc, exc


def test_without_spares_or_requeue_the_job_ends_with_the_resubmit_command(cli: CK, tmp_path: Path) -> None:
    site, run_dir = _site(tmp_path), cli.runs / "no-requeue"
    proc = _submit(cli, site, run_dir, _env(cli, tmp_path, {"node1"}), "--nodes", "2", "--set", "max_restarts=0")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    job = _job_id(proc.stdout)
    reason = (run_dir / f"{job}.reason").read_text()
    assert reason.startswith("preflight: 1 nodes failed, 0 spares: node1 (failed: "), reason
    assert f"resubmit without them: clusterkit submit --exclude-from {job} --site {site}" in reason
    assert "--out" not in reason and not RANK_LINE.search(_logs(run_dir))
