"""Placement by topology/block on the Slurm testbed (Slurm 24.05+: ``tests/run.sh --slurm 24.11``;
skipped on 22.05): slurmctld restarted with two blocks that cut across Slurm's node order (b1 =
node1, node3; b2 = node2, node4) and ``BlockSizes=2`` for this module alone, restored after.  A job
with ``network.topology: {plugin: block, segment: 2}`` asks for ``--segment=2``: each segment of
two nodes lies inside one block, and the hosts come in block order.  Apart from
test_topology.py's topology/tree so that each module's slurmctld has one plugin at a time."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import CK, Testbed
from .test_topology import _hosts, _restarted_with

BLOCKS = "BlockName=b1 Nodes=node[1,3]\nBlockName=b2 Nodes=node[2,4]\nBlockSizes=2\n"


def _slurm_version(testbed: Testbed) -> tuple[int, int]:
    m = re.search(r"(\d+)\.(\d+)", testbed.run("scontrol", "--version").stdout)
    assert m
    return int(m.group(1)), int(m.group(2))


@pytest.fixture(scope="module")
def block(testbed: Testbed) -> Iterator[Testbed]:
    if _slurm_version(testbed) < (24, 5):
        pytest.skip("topology/block with --segment needs Slurm 24.05+ (tests/slurm/testbed.sh --slurm 24.11)")
    with _restarted_with(testbed, "block", BLOCKS) as bed:
        yield bed


def test_block_segments_each_inside_one_block(cli: CK, block: Testbed, tmp_path: Path) -> None:
    hosts = _hosts(cli, tmp_path, 4, {"plugin": "block", "segment": 2})
    assert hosts == ["node1", "node3", "node2", "node4"]
    two = _hosts(cli, tmp_path, 2, {"plugin": "block", "segment": 2})
    assert sorted(two) in (["node1", "node3"], ["node2", "node4"]), two
