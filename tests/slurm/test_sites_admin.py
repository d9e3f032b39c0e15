"""``clusterkit sites init`` / ``sites drift`` against the real Slurm testbed (and the SSH lab).

The session testbed is cluster ``testbed``: partition ``debug`` with node1..node4, 8 CPUs,
RealMemory 64000 MB and ``Gres=gpu:8`` each.  A second, smaller testbed with other GPU counts
is started in one test, with its own directory and ports.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import CLIResult
from .conftest import CK, TESTBED, Testbed, _free_port_block


def _init(cli: CK, out: Path, *args: str, env: dict[str, str] | None = None) -> CLIResult:
    return cli("sites", "init", out.stem, "--from-slurm", "--out", str(out), *args, env=env)


def test_init_writes_a_valid_site_that_shows_no_drift(cli: CK, tmp_path: Path) -> None:
    site = tmp_path / "tb.yaml"
    proc = _init(cli, site)
    assert proc.returncode == 0, proc.stderr
    text = site.read_text()
    assert 'cluster: "testbed"' in text and 'partition: "debug"' in text
    assert re.search(r'nodelist: "node\[1-4\]"', text) and re.search(r"gpus_per_node: 8 +# Gres=gpu:8", text)
    assert re.search(r"cpus_per_node: 8 ", text) and re.search(r"mem_gb: 62.5 +# RealMemory=64000 MB", text)
    # what Slurm cannot tell is a commented placeholder, listed on stderr
    assert "# account: ACCOUNT" in text and "fill in: scheduler.account" in proc.stderr
    assert "fill in: cost" in proc.stderr and "unverified: network.fabric" in proc.stderr
    assert re.search(r"fabric: ethernet +# unverified", text)
    val = cli("sites", "validate", str(site))
    assert val.returncode == 0 and "ok (tb)" in val.stdout, val.stderr
    drift = cli("sites", "drift", str(site))
    assert drift.returncode == 0, drift.stdout + drift.stderr
    assert "0 drifts" in drift.stdout and "DRIFT" not in drift.stdout
    again = _init(cli, site)
    assert again.returncode == 2 and "file exists" in again.stderr and site.read_text() == text


def test_init_prints_to_stdout_and_refuses_bad_partition(cli: CK) -> None:
    proc = cli("sites", "init", "tb", "--from-slurm")
    assert proc.returncode == 0 and proc.stdout.startswith("# clusterkit site config"), proc.stderr
    bad = cli("sites", "init", "tb", "--from-slurm", "--partition", "nosuch")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == ("clusterkit: error: partition 'nosuch' does not exist on cluster testbed; "
                                  "partitions: debug, high")


def _conf_with_dead_controller(bed: Testbed, tmp_path: Path) -> Path:
    """A copy of the testbed's slurm.conf naming a port nothing listens on."""
    dead = _free_port_block(1)
    conf = tmp_path / "slurm.conf"
    text = re.sub(r"^SlurmctldPort=\d+$", f"SlurmctldPort={dead}", bed.slurm_conf.read_text(), flags=re.M)
    # scontrol keeps retrying a refused connection for MessageTimeout (10 s by default)
    conf.write_text(text + "MessageTimeout=1\n")
    return conf


def test_unreachable_controller_is_exit_3_in_one_line(cli: CK, tmp_path: Path) -> None:
    site = tmp_path / "tb.yaml"
    assert _init(cli, site).returncode == 0
    env = cli.env(SLURM_CONF=str(_conf_with_dead_controller(cli.bed, tmp_path)))
    for args in (("sites", "init", "x", "--from-slurm"), ("sites", "drift", str(site))):
        proc = cli(*args, env=env, timeout=120)
        assert proc.returncode == 3, proc.stderr
        lines = proc.stderr.strip().splitlines()
        # the one unreachable error, worded as every command words it, with Slurm's own reason
        assert len(lines) == 1 and lines[0].startswith("clusterkit: error: cannot reach Slurm controller: "), lines
        assert "Unable to contact slurm controller" in lines[0], lines
    # a broken site file next to an unreachable controller: 2 wins over 3
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: broken\nnodes: {nodelist: 'node[1-4]', gpus_per_node: 0}\n")
    proc = cli("sites", "drift", str(site), str(broken), env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "broken.yaml:2: nodes.gpus_per_node" in proc.stderr


SITE_WITH_COMMENTS = """\
# Site for the testbed, kept by hand.  Comments and anchors must survive --write.
name: tb-hand   # the name users type
extends: base.yaml
scheduler:
  kind: slurm
  cluster: testbed
  partition: debug        # the only partition
  time: "00:30:00"
stages:
  multi-node: &multi {launcher: torchrun, time: "00:20:00"}
  large-cluster:
    <<: *multi             # same as multi-node, but DeepSpeed
    launcher: deepspeed
nodes:
  nodelist: "node[1-3,9]"  # node4 was added later; node9 was retired
  gpus_per_node: 4         # wrong on purpose
  mem_gb: 62               # within the tolerance of RealMemory=64000 MB
network: {fabric: ethernet}
"""

BASE = """\
# shared defaults
nodes:
  cpus_per_node: 16        # inherited by tb-hand: wrong for the testbed
"""


def test_drift_after_edit_then_write_keeps_every_other_line(cli: CK, tmp_path: Path) -> None:
    site, base = tmp_path / "tb-hand.yaml", tmp_path / "base.yaml"
    site.write_text(SITE_WITH_COMMENTS)
    base.write_text(BASE)
    proc = cli("sites", "drift", str(site), "--json")
    assert proc.returncode == 1, proc.stderr
    drift = {(d["key"], d["nodes"]): d for d in json.loads(proc.stdout)["sites"][0]["drift"]}
    gpus = drift[("nodes.gpus_per_node", "node[1-3]")]
    assert (gpus["line"], gpus["configured"], gpus["live"]) == (16, 4, 8)
    assert gpus["file"].endswith("tb-hand.yaml")
    assert drift[("nodes.nodelist", "node9")]["message"] == "nodes Slurm does not know"
    assert drift[("nodes.nodelist", "node4")]["message"] == "nodes of partition debug the config lacks"
    cpus = drift[("nodes.cpus_per_node", "node[1-3]")]
    assert cpus["file"].endswith("base.yaml") and cpus["line"] == 3      # where the value comes from
    assert not any(k == "nodes.mem_gb" for k, _ in drift)

    dry = cli("sites", "drift", str(site), "--dry-run")
    assert dry.returncode == 1 and site.read_text() == SITE_WITH_COMMENTS
    assert dry.stdout.startswith("--- a/") and "DRIFT" not in dry.stdout
    assert '+  nodelist: "node[1-4]"  # node4 was added later; node9 was retired' in dry.stdout

    wrote = cli("sites", "drift", str(site), "--write")
    assert wrote.returncode == 1 and dry.stdout in wrote.stdout, wrote.stderr
    new = site.read_text()
    assert base.read_text() == BASE                                       # the parent is never edited
    old_lines, new_lines = SITE_WITH_COMMENTS.splitlines(), new.splitlines()
    assert new_lines.pop(17) == "  cpus_per_node: 8"      # the inherited key, overridden here (after mem_gb)
    changed = {15: '  nodelist: "node[1-4]"  # node4 was added later; node9 was retired',
               16: "  gpus_per_node: 8         # wrong on purpose"}
    assert len(new_lines) == len(old_lines)
    for i, line in enumerate(old_lines, 1):
        assert new_lines[i - 1] == changed.get(i, line)   # byte-identical otherwise
    assert cli("sites", "validate", str(site)).returncode == 0
    after = cli("sites", "drift", str(site))
    assert after.returncode == 0, after.stdout


def test_node_set_down_is_node_state_not_drift(cli: CK, tmp_path: Path) -> None:
    site = tmp_path / "tb.yaml"
    assert _init(cli, site).returncode == 0
    cli.bed.run("scontrol", "update", "NodeName=node2", "State=DOWN", "Reason=test")
    try:
        proc = cli("sites", "drift", str(site))
        js = json.loads(cli("sites", "drift", str(site), "--json").stdout)
    finally:
        cli.bed.resume("node2")
    assert proc.returncode == 0, proc.stdout
    assert "node state (not drift):\n    node2: DOWN (test)" in proc.stdout
    assert js["sites"][0]["node_state"] == [{"nodes": "node2", "state": "DOWN", "reason": "test"}]
    assert js["sites"][0]["drift"] == []


def test_all_checks_the_sites_of_this_cluster_and_lists_the_rest(cli: CK, tmp_path: Path) -> None:
    sites = tmp_path / "sites"
    sites.mkdir()
    assert _init(cli, sites / "tb.yaml").returncode == 0
    (sites / "other.yaml").write_text("name: other\nscheduler: {cluster: elsewhere}\n"
                                      "nodes: {nodelist: 'g[1-2]', gpus_per_node: 8}\n")
    proc = cli("sites", "drift", "--all", env=cli.env(CLUSTERKIT_SITES=str(sites)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "site tb (" in proc.stdout and "0 drifts" in proc.stdout
    assert re.search(r"skipped other \(.*other.yaml\): cluster elsewhere, not testbed", proc.stdout)
    assert re.search(r"skipped local \(.*\): scheduler.kind is local", proc.stdout)
    local = cli("sites", "drift", "local")
    assert local.returncode == 2 and local.stderr.strip() == (
        "clusterkit: error: local: scheduler.kind is local: there is no Slurm cluster to compare it with")


@pytest.fixture(scope="module")
def gpu4_testbed(testbed: Testbed) -> Iterator[dict[str, str]]:
    """A second testbed, same cluster name, restarted with 2 nodes of gpu:h100:4: its client env."""
    lab = Path(tempfile.mkdtemp(prefix="clusterkit-slurmlab-gpu4-"))
    lab.chmod(0o755)
    env = dict(os.environ, SLURMLAB_DIR=str(lab), SLURMLAB_NODES="2", SLURMLAB_GPUS="4", SLURMLAB_GPU_TYPE="h100",
               SLURMLAB_PORT=str(_free_port_block(3)), SLURMLAB_FIRST_JOB_ID=str(random.randrange(1000, 60000) * 1000))
    env.pop("SLURM_CONF", None)
    proc = subprocess.run(["bash", str(TESTBED)], env=env, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        pytest.fail(f"second testbed did not start:\n{proc.stderr[-2000:]}")
    try:
        yield {"SLURM_CONF": str(lab / "etc" / "slurm.conf")}
    finally:
        subprocess.run(["bash", str(TESTBED), "--stop"], env=env, capture_output=True, text=True, timeout=120)
        shutil.rmtree(lab, ignore_errors=True)


def test_drift_after_restart_with_other_gpu_counts(cli: CK, tmp_path: Path, gpu4_testbed: dict[str, str]) -> None:
    site = tmp_path / "tb.yaml"
    assert _init(cli, site).returncode == 0                     # from the 4 x gpu:8 testbed
    proc = cli("sites", "drift", str(site), "--json", env=cli.env(**gpu4_testbed))
    assert proc.returncode == 1, proc.stderr
    found = {(d["key"], d["nodes"], str(d["live"])) for d in json.loads(proc.stdout)["sites"][0]["drift"]}
    assert ("nodes.gpus_per_node", "node[1-2]", "4") in found
    assert ("nodes.nodelist", "node[3-4]", "node[1-2]") in found
    fresh = tmp_path / "gpu4.yaml"
    init = _init(cli, fresh, env=cli.env(**gpu4_testbed))
    assert init.returncode == 0, init.stderr
    assert re.search(r"gpus_per_node: 4 +# Gres=gpu:h100:4", fresh.read_text())
    assert 'gpu_model: "H100"' in fresh.read_text()


def test_a_typed_gpu_request_is_the_one_form_slurm_takes(cli: CK, tmp_path: Path,
                                                          gpu4_testbed: dict[str, str]) -> None:
    """``--set gpu_type=h100`` (issue 40): ``#SBATCH --gpus-per-node=h100:N``, no gres beside it;
    Slurm with typed GRES (gpu:h100:4) takes it, and refuses a type its nodes do not have."""
    env = cli.env(**gpu4_testbed)
    site = tmp_path / "gpu4.yaml"
    init = _init(cli, site, env=env)
    assert init.returncode == 0, init.stderr
    for gpu_type, takes in (("h100", True), ("a100", False)):
        out = tmp_path / gpu_type
        proc = cli("render", "--site", str(site), "--stage", "single-node", "--nodes", "1", "--gpus-per-node", "4",
                   "--set", f"gpu_type={gpu_type}", "--out", str(out), "--", "python", "train.py", env=env)
        assert proc.returncode == 0, proc.stderr
        script = (out / "job.sbatch").read_text()
        assert f"\n#SBATCH --gpus-per-node={gpu_type}:4\n" in script and "--gres" not in script
        test = subprocess.run(["sbatch", "--test-only", str(out / "job.sbatch")], env=env, capture_output=True,
                              text=True, timeout=60)
        assert (test.returncode == 0) is takes, (gpu_type, test.stdout, test.stderr)


def test_mixed_partition_and_nodes_without_gpus(cli: CK, tmp_path: Path, gpu4_testbed: dict[str, str]) -> None:
    env = cli.env(**gpu4_testbed)
    # this throwaway testbed only: node2 loses its GPUs (Slurm cannot give them back until a restart)
    subprocess.run(["scontrol", "update", "NodeName=node2", "Gres=gpu:0"], env=env, check=True, timeout=30)
    mixed = cli("sites", "init", "mixed", "--from-slurm", env=env)
    assert mixed.returncode == 2 and not mixed.stdout
    assert mixed.stderr.strip() == ("clusterkit: error: partition debug has 2 node types "
                                    "(node1: 8 CPUs, 64000 MB, 4 x h100; node2: 8 CPUs, 64000 MB, no GPUs); "
                                    "pick one with --nodelist")
    site = tmp_path / "cpu.yaml"
    proc = _init(cli, site, "--nodelist", "node2", env=env)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"gpus_per_node: 1 +# unverified: Slurm has no gpu GRES", site.read_text())
    assert "unverified: nodes.gpus_per_node" in proc.stderr
    drift = cli("sites", "drift", str(site), env=env)
    assert drift.returncode == 1, drift.stdout              # node1 is in the partition, not in the site
    assert "DRIFT nodes.nodelist" in drift.stdout
    assert "on node1 (nodes of partition debug the config lacks)" in drift.stdout
    assert "note: Slurm schedules no GPUs (no gpu GRES) on node2" in drift.stdout
    assert "gpus_per_node" not in drift.stdout.split("note:")[0]


# ---------------------------------------------------------------------------------------------
# --probe ssh: the testbed's nodes are also SSH lab nodes with fake nvidia-smi, sysfs and mounts

PROFILES = {"node1": "healthy", "node2": "old_driver", "node3": "ib_down", "node4": "no_lustre"}

PROBED_SITE = """\
name: tb-probe
scheduler: {{kind: slurm, cluster: testbed, partition: debug}}
nodes: {{nodelist: "node[1-4]", gpus_per_node: 8, gpu_model: H100, cpus_per_node: 8, mem_gb: 62.5}}
ssh: {{port: {port}, known_hosts: "{known_hosts}", connect_timeout_s: 3, command_timeout_s: 15}}
software: {{driver_min: "535.104"}}
network:
  fabric: infiniband
  hcas: [mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7]
  port_rate_gbps: 400
storage:
  - {{path: /lustre/scratch, type: lustre}}
"""


@pytest.fixture
def lab_env(sshlab_factory, cli: CK) -> tuple[dict[str, str], object]:
    lab = sshlab_factory(PROFILES, use_netns=False)   # loopback on this host: slurmctld must stay reachable
    return cli.env(CLUSTERKIT_SSH_CONFIG=str(lab.ssh_config)), lab


def test_probe_ssh_finds_old_driver_and_ib_port_down(cli: CK, tmp_path: Path, lab_env) -> None:
    env, lab = lab_env
    site = tmp_path / "tb-probe.yaml"
    site.write_text(PROBED_SITE.format(port=lab.port, known_hosts=lab.known_hosts))
    proc = cli("sites", "drift", str(site), "--probe", "ssh", "--json", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = {(d["key"], d["nodes"]): d for d in json.loads(proc.stdout)["sites"][0]["drift"]}
    assert set(found) == {("software.driver_min", "node2"), ("network.hcas", "node3"),
                          ("network.port_rate_gbps", "node3"), ("storage[0].path", "node4")}, found
    assert found[("storage[0].path", "node4")]["live"] == "not mounted"
    assert found[("software.driver_min", "node2")]["live"] == "470.239.06"
    assert found[("software.driver_min", "node2")]["line"] == 5
    assert found[("network.hcas", "node3")]["live"] == "mlx5_3 port 1 DOWN"
    assert found[("network.port_rate_gbps", "node3")]["live"] == "mlx5_3 port 1 10 Gb/s"


def test_init_with_probe_writes_node_facts(cli: CK, tmp_path: Path, lab_env) -> None:
    env, _lab = lab_env
    site = tmp_path / "probed.yaml"
    proc = _init(cli, site, "--nodelist", "node[1,4]", "--probe", "ssh", env=env)
    assert proc.returncode == 0, proc.stderr
    text = site.read_text()
    assert 'driver_min: "550.54.15"' in text and 'gpu_model: "H100"' in text
    assert re.search(r"fabric: infiniband +# link layer InfiniBand", text)
    assert "hcas: [mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7]" in text
    assert "port_rate_gbps: 400" in text
    # node4 has no Lustre: only what every probed node mounts becomes storage
    assert '- {path: "/home", type: nfs}' in text and "/lustre" not in text
    assert cli("sites", "validate", str(site)).returncode == 0


def test_partition_and_time_limit_drift(cli: CK, tmp_path: Path, gpu4_testbed: dict[str, str]) -> None:
    env = cli.env(**gpu4_testbed)
    subprocess.run(["scontrol", "update", "PartitionName=debug", "MaxTime=00:30:00"], env=env, check=True, timeout=30)
    site = tmp_path / "limits.yaml"
    site.write_text('name: limits\nscheduler: {cluster: testbed, partition: debug, time: "01:00:00"}\n'
                    'nodes: {nodelist: "node[1-2]", gpus_per_node: 4, cpus_per_node: 8, mem_gb: 62.5}\n'
                    'stages: {large-cluster: {partition: debug}}\n')
    proc = cli("sites", "drift", str(site), env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ("DRIFT scheduler.time at limits.yaml:2: configured 01:00:00, live 00:30:00 "
            "(longer than partition debug's MaxTime=00:30:00: Slurm refuses such jobs)"
            ) in proc.stdout.replace(str(tmp_path) + "/", "")
    site.write_text(site.read_text().replace("partition: debug, time", "partition: gpu, time"))
    gone = cli("sites", "drift", str(site), "--json", env=env)
    drift = json.loads(gone.stdout)["sites"][0]["drift"]
    assert gone.returncode == 1 and [d["key"] for d in drift] == ["scheduler.partition"], drift
    assert drift[0]["live"] == ["debug", "high"] and "partitions: debug, high" in drift[0]["message"]


def test_probe_srun_reads_the_nodes_inside_slurm(cli: CK) -> None:
    # the testbed's nodes: no nvidia-smi, no HCA, a veth each and this machine's mounts; srun runs
    # on the login node, where the nodes can reach it back
    proc = cli("sites", "init", "srunned", "--from-slurm", "--probe", "srun", env=cli.env(login=True))
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"fabric: ethernet +# unverified: no HCA found on the probed nodes", proc.stdout)
    assert "fill in: software.driver_min: nvidia-smi reported no driver on the probed nodes" in proc.stderr


RENAMED = """\
name: tb-renamed
scheduler: {{kind: slurm, cluster: testbed, partition: debug}}
nodes: {{nodelist: "node[1-4]", gpus_per_node: 8, cpus_per_node: 8, mem_gb: 62.5}}
ssh: {{port: {port}, known_hosts: "{known_hosts}", connect_timeout_s: 3, command_timeout_s: 15}}
network:
  fabric: infiniband
  hcas:             # before the firmware update
    - mlx5_0
    - mlx5_1
    - mlx5_2
    - mlx5_3
    - mlx5_4
    - mlx5_5
    - mlx5_6
    - mlx5_8
  port_rate_gbps: 800    # a requirement: --write never lowers it
"""


def test_renamed_hca_is_drift_and_write_fixes_the_list_only(cli: CK, tmp_path: Path, lab_env) -> None:
    env, lab = lab_env
    site = tmp_path / "tb-renamed.yaml"
    text = RENAMED.format(port=lab.port, known_hosts=lab.known_hosts)
    site.write_text(text)
    proc = cli("sites", "drift", str(site), "--probe", "ssh", "--json", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = {(d["key"], d["nodes"], d["live"]) for d in json.loads(proc.stdout)["sites"][0]["drift"]}
    assert ("network.hcas", "node[1-4]", "missing mlx5_8; unlisted mlx5_7 (renamed?)") in found
    assert ("network.port_rate_gbps", "node[1-2,4]", "mlx5_0 port 1 400 Gb/s, mlx5_1 port 1 400 Gb/s, "
            "mlx5_2 port 1 400 Gb/s, mlx5_3 port 1 400 Gb/s, mlx5_4 port 1 400 Gb/s, mlx5_5 port 1 400 Gb/s, "
            "mlx5_6 port 1 400 Gb/s") in found
    wrote = cli("sites", "drift", str(site), "--probe", "ssh", "--write", env=env)
    assert wrote.returncode == 1, wrote.stdout + wrote.stderr
    assert "-    - mlx5_8\n+    - mlx5_7\n" in wrote.stdout
    assert site.read_text() == text.replace("    - mlx5_8\n", "    - mlx5_7\n")   # port_rate_gbps kept at 800


def test_probe_reports_unreachable_nodes_exit_3(cli: CK, tmp_path: Path, sshlab_factory) -> None:
    lab = sshlab_factory({"node1": "healthy", "node2": "healthy", "node3": "healthy", "node4": "@refused"},
                         use_netns=False)
    env = cli.env(CLUSTERKIT_SSH_CONFIG=str(lab.ssh_config))
    site = tmp_path / "part.yaml"
    init = _init(cli, site, "--probe", "ssh", env=env)
    assert init.returncode == 3 and site.exists(), init.stderr
    assert re.search(r"^clusterkit: error: could not probe node4: refused: ", init.stderr, re.M)
    assert "hcas: [mlx5_0" in site.read_text()                           # from the nodes that answered
    drift = cli("sites", "drift", str(site), "--probe", "ssh", env=env)
    assert drift.returncode == 3, drift.stdout + drift.stderr
    assert re.search(r"^  UNREACHABLE node4: refused: ", drift.stdout, re.M)
