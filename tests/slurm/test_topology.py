"""Placement by topology on the Slurm testbed: slurmctld restarted with topology/tree for these
tests alone (two leaf switches that cut across Slurm's node order: leaf1 = node1, node3; leaf2 =
node2, node4) and restarted without it after, so every other test keeps the default testbed.

A 2-node job with ``network.topology: {plugin: tree, max_switches: 1}`` gets both nodes under
one switch (Slurm alone would give node1 and node2, the lowest-numbered idle nodes), and a
4-node job's hosts come in switch order (node1, node3, node2, node4), each read from what the
job itself wrote.  topology/block with ``--segment`` (Slurm 24.05+) is test_topology_block.py's:
each module restarts slurmctld once with its own plugin and restores it after.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from .conftest import CK, REPO, Testbed

TOPOLOGY = "SwitchName=leaf1 Nodes=node[1,3]\nSwitchName=leaf2 Nodes=node[2,4]\nSwitchName=spine Switches=leaf[1-2]\n"
RECORD = 'printf "%s\\n" "$CK_NODELIST" > "$CK_RUN_DIR/hosts"'


@contextmanager
def _restarted_with(testbed: Testbed, plugin: str, conf: str) -> Iterator[Testbed]:
    """The testbed's slurmctld with ``plugin`` and ``conf`` as its topology.conf, restored after.
    slurm-nodes.conf is written in place: the nodes see it through a bind mount of that file."""
    etc = testbed.slurm_conf.parent
    confs = [testbed.slurm_conf, etc / "slurm-nodes.conf"]
    saved = {p: p.read_text() for p in confs}
    assert not any("TopologyPlugin" in text for text in saved.values())
    testbed.wait_idle()
    testbed.stop_controller()
    try:
        (etc / "topology.conf").write_text(conf)
        for path in confs:
            path.write_text(saved[path] + f"TopologyPlugin=topology/{plugin}\n")
        testbed.start_controller()
        answer = testbed.run("scontrol", "show", "topology")
        assert conf.split()[0] in answer.stdout, answer
        yield testbed
    finally:
        testbed.run("scancel", "--user", "root", check=False)
        testbed.stop_controller()
        for path in confs:
            path.write_text(saved[path])
        (etc / "topology.conf").unlink(missing_ok=True)
        testbed.start_controller()
        assert testbed.run("scontrol", "show", "topology", check=False).stdout.strip() == ""


@pytest.fixture(scope="module")
def tree(testbed: Testbed) -> Iterator[Testbed]:
    with _restarted_with(testbed, "tree", TOPOLOGY) as bed:
        yield bed


def _site(tmp_path: Path, topo: dict[str, object]) -> Path:
    data = yaml.safe_load((REPO / "site_configs" / "testbed.yaml").read_text())
    data["name"] = "testbed-tree"
    data["network"]["topology"] = topo
    path = tmp_path / "testbed-tree.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _hosts(cli: CK, tmp_path: Path, nodes: int, topo: dict[str, object]) -> list[str]:
    run_dir = cli.runs / f"{topo['plugin']}-{nodes}"
    proc = cli("submit", "--site", str(_site(tmp_path, topo)), "--stage", "multi-node", "--nodes", str(nodes),
               "--gpus-per-node", "1", "--launcher", "srun", "--out", str(run_dir), "--wait", "--setup", RECORD,
               "--", "true", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = re.search(r"Submitted job (\d+)", proc.stdout)
    assert job, proc.stdout
    log = (run_dir / "logs" / f"slurm-{job.group(1)}.out").read_text()
    assert "hosts ordered by switch or block" in log, log
    return (run_dir / "hosts").read_text().strip().split(",")


def test_a_two_node_job_is_placed_under_one_switch(cli: CK, tree: Testbed, tmp_path: Path) -> None:
    hosts = _hosts(cli, tmp_path, 2, {"plugin": "tree", "max_switches": 1, "max_wait": 1})
    assert sorted(hosts) in (["node1", "node3"], ["node2", "node4"]), hosts


def test_the_hosts_come_in_switch_order_head_first(cli: CK, tree: Testbed, tmp_path: Path) -> None:
    hosts = _hosts(cli, tmp_path, 4, {"plugin": "tree", "max_switches": 2})
    assert hosts == ["node1", "node3", "node2", "node4"]
