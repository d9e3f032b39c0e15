"""``clusterkit submit`` on a site with ``preflight.before_submit: true`` checks the nodes the job
could get over SSH first, then keeps bad ones out.

The Slurm testbed's nodes node1..node4 are also served as SSH test nodes (loopback addresses,
fake nvidia-smi/IB/mount data per node): node3's InfiniBand port is down.  Under policy
``exclude`` the job is submitted with ``--exclude=node3`` and runs on the other nodes; under
``refuse`` nothing is submitted and no record is written.  A drained node is not checked (the job
cannot get it); a site without ``before_submit`` checks nothing before submitting unless
``--preflight-transport`` asks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .conftest import CK

pytest.importorskip("torch", reason="examples/allreduce.py needs torch (pip install torch, CPU build)")

PROFILES = {"node1": "healthy", "node2": "healthy", "node3": "ib_down", "node4": "healthy"}

SITE = """\
name: testbed-preflight
scheduler: {{kind: slurm, partition: debug, time: "00:05:00"}}
nodes: {{nodelist: "node[1-4]", gpus_per_node: 8, gpu_model: H100, cpus_per_node: 8}}
ssh: {{port: {port}, known_hosts: "{known_hosts}", connect_timeout_s: 3, command_timeout_s: 15}}
network:
  fabric: infiniband
  hcas: [mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7]
  port_rate_gbps: 400
storage:
  - {{path: /lustre/scratch, type: lustre, use: [data, checkpoints]}}
  - {{path: /tmp, type: local, shared: true}}     # the run directories: every testbed node is this machine
preflight: {{policy: {policy}, max_excluded_fraction: 0.5, before_submit: {before}, in_job: false}}
"""


@pytest.fixture
def lab_site(sshlab_factory, tmp_path: Path):
    lab = sshlab_factory(PROFILES, use_netns=False)   # loopback on this host: slurmctld must stay reachable
    for host in lab.hosts:   # the site declares /tmp (the run directories) shared: preflight checks it too
        (lab.node_dir(host) / "root" / "tmp").mkdir(exist_ok=True)

    def make(policy: str, before: bool = True) -> tuple[Path, dict[str, str]]:
        path = tmp_path / f"site-{policy}-{before}.yaml"
        path.write_text(SITE.format(port=lab.port, known_hosts=lab.known_hosts, policy=policy,
                                    before=str(before).lower()))
        return path, {"CLUSTERKIT_SSH_CONFIG": str(lab.ssh_config)}

    return make


def test_bad_node_is_excluded_and_the_job_runs_on_the_rest(cli: CK, lab_site) -> None:
    site, extra = lab_site("exclude")
    cli.bed.wait_idle()   # the count below is of idle nodes: earlier tests' jobs may still hold some
    run_dir = cli.runs / "preflight-exclude"
    proc = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "3", "--gpus-per-node", "1",
               "--launcher", "srun", "--out", str(run_dir), "--wait", "--", "python", "examples/allreduce.py",
               env=cli.env(**extra))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "node3" in proc.stderr and "DOWN" in proc.stderr           # the report names node and reason
    assert "preflight: checking 4 of 4 candidate node(s): those of partition debug" in proc.stderr
    script = (run_dir / "job.sbatch").read_text()
    assert "#SBATCH --exclude=node3\n" in script
    assert json.loads((run_dir / "plan.json").read_text())["exclude"] == ["node3"]
    logs = "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))
    hosts = set(re.findall(r"^allreduce rank \d+/3 on (\S+): .* ok$", logs, re.M))
    assert hosts == {"node1", "node2", "node4"}
    assert "allreduce OK: world_size=3" in logs
    # the node history remembers what preflight found on node3, for this job
    job = re.search(r"Submitted job (\d+)", proc.stdout).group(1)
    nodes = cli("nodes", "--site", str(site), "--json", env=cli.env(**extra), timeout=60)
    assert nodes.code == 0, nodes.err
    [node3] = json.loads(nodes.out)["nodes"]
    assert (node3["node"], node3["sources"], node3["jobs"]) == ("node3", ["preflight"], [job]), node3
    # the ib_down profile's port 1 of mlx5_3 is down: its state and its rate each fail a check
    assert node3["verdicts"] == {"ib.ports": 1, "ib.rate": 1}, node3
    assert node3["failures"] == node3["recent_hardware"] == 2, node3


def test_policy_refuse_submits_nothing(cli: CK, lab_site) -> None:
    site, extra = lab_site("refuse")
    before = cli.records()
    run_dir = cli.runs / "preflight-refuse"
    proc = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--out", str(run_dir),
               "--", "python", "examples/allreduce.py", env=cli.env(**extra))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "clusterkit: error: preflight: not submitting" in proc.stderr and "node3" in proc.stderr
    assert "--skip-preflight" in proc.stderr and "--preflight-transport srun" in proc.stderr   # the ways out
    assert cli.records() == before and not run_dir.exists()


def test_skip_preflight_submits_without_checking(cli: CK, lab_site) -> None:
    site, extra = lab_site("refuse")
    run_dir = cli.runs / "preflight-skip"
    proc = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--skip-preflight", "--out", str(run_dir), "--dry-run", "--", "python", "examples/allreduce.py",
               env=cli.env(**extra))
    assert proc.returncode == 0, proc.stderr
    assert "--exclude" not in (run_dir / "job.sbatch").read_text()


def test_a_drained_node_is_not_checked(cli: CK, lab_site, testbed) -> None:
    """Only the nodes the job could get are checked: node4 is drained, so it is left alone."""
    site, extra = lab_site("exclude")
    run_dir = cli.runs / "preflight-drained"
    testbed.wait_idle()
    testbed.run("scontrol", "update", "NodeName=node4", "State=DRAIN", "Reason=ck-preflight-test")
    try:
        proc = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
                   "--launcher", "srun", "--out", str(run_dir), "--wait", "--", "python", "examples/allreduce.py",
                   env=cli.env(**extra))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "preflight: checking 3 of 4 candidate node(s)" in proc.stderr
        checked = [line for line in proc.stderr.splitlines() if line.startswith("preflight: ")]
        assert any("node3" in line for line in checked) and not any("node4" in line for line in checked), checked
        assert "#SBATCH --exclude=node3\n" in (run_dir / "job.sbatch").read_text()
        logs = "".join(p.read_text() for p in (run_dir / "logs").glob("*.out"))
        assert set(re.findall(r"^allreduce rank \d+/2 on (\S+): .* ok$", logs, re.M)) == {"node1", "node2"}
    finally:
        testbed.resume("node4")


def test_without_before_submit_only_the_option_checks_first(cli: CK, lab_site) -> None:
    site, extra = lab_site("refuse", before=False)
    cli.bed.wait_idle()   # a node still draining from the test before would not be a candidate
    plain = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
                "--out", str(cli.runs / "no-before"), "--dry-run", "--", "python", "examples/allreduce.py",
                env=cli.env(**extra))
    assert plain.returncode == 0 and "preflight:" not in plain.stderr, plain.stderr
    asked = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
                "--preflight-transport", "ssh", "--out", str(cli.runs / "asked"), "--", "python",
                "examples/allreduce.py", env=cli.env(**extra))
    assert asked.returncode == 1, asked.stdout + asked.stderr
    assert "preflight: checking 4 of 4 candidate node(s)" in asked.stderr
    assert "clusterkit: error: preflight: not submitting" in asked.stderr and "node3" in asked.stderr
    assert not (cli.runs / "asked").exists()
