"""Real ``scontrol show topology`` output (tests/data/captures/topology) through
:mod:`clusterkit.topology`, the job's host order (``python -m clusterkit.supervise.hostorder``
with a stand-in ``scontrol`` on PATH run by the real client seam) and ``sites init``.

``<name>.expected.json`` holds, read off the capture by hand: the plugin, each switch's level,
each node's leaf switch, and a host list with its order by switch (the first host first, the
switches in the order their first host comes, the hosts of one switch in their order).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit import topology
from clusterkit.config.load import load_file
from clusterkit.sites import admin
from tests.captures.capture import Capture, captures, env_with, stand_in
from tests.conftest import REPO
from tests.totality import assert_total

CAPTURES = captures("topology")
WHOLE = [c for c in CAPTURES if c.header["command"] == "scontrol show topology"]
TESTBED = REPO / "tests" / "data" / "sites" / "slurm-22.05"


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_switches_and_leaves_as_read_by_hand(cap: Capture) -> None:
    topo = topology.parse(cap.body)
    assert topo.unparsed == ()
    assert topo.plugin == cap.expected["plugin"]
    assert {g.name: g.level for g in topo.groups} == cap.expected["switches"]
    assert topo.group_of() == cap.expected["leaf_of"]


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_hosts_ordered_by_switch(cap: Capture) -> None:
    order = cap.expected["order"]
    got = topology.order_hosts(order["hosts"], topology.parse(cap.body).group_of())
    assert got == order["by_switch"]
    assert got[0] == order["hosts"][0]   # the head stays first


@pytest.mark.parametrize("cap", WHOLE, ids=[c.name for c in WHOLE])
def test_the_job_orders_its_hosts_through_a_stand_in_scontrol(cap: Capture, tmp_path: Path) -> None:
    stand_in(tmp_path / "bin", "scontrol", cap.body)
    env = env_with(tmp_path / "bin")
    order = cap.expected["order"]
    out = subprocess.run([sys.executable, "-m", "clusterkit.supervise.hostorder", ",".join(order["hosts"])],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == order["by_switch"]
    assert "hosts ordered by switch or block" in out.stderr


def test_no_topology_keeps_the_order_and_says_why(tmp_path: Path) -> None:
    stand_in(tmp_path / "bin", "scontrol", "")   # topology/none (22.05) prints nothing
    out = subprocess.run([sys.executable, "-m", "clusterkit.supervise.hostorder", "node2,node1"],
                         env=env_with(tmp_path / "bin"), capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (1, "")
    assert "lists no switch or block" in out.stderr
    bad = subprocess.run([sys.executable, "-m", "clusterkit.supervise.hostorder", "node1,no de"],
                         env=env_with(tmp_path / "bin"), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_sites_init_writes_the_plugin_from_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the testbed's 22.05 config and nodes, its TopologyPlugin line changed here to topology/tree;
    # the topology: the capture recorded on the testbed's node names
    cap = next(c for c in WHOLE if c.path.stem == "tree-22.05.8-two-leaves")
    config = (TESTBED / "show-config.txt").read_text()
    assert "TopologyPlugin          = topology/none" in config
    config = config.replace("TopologyPlugin          = topology/none", "TopologyPlugin          = topology/tree")
    stand_in(tmp_path / "bin", "scontrol", (TESTBED / "show-node-o.txt").read_text(),
             by_args={"show config": config, "show partition -o": "", "show topology": cap.body})
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    draft = admin.init_site("topo", partition=None, nodes=None, probe_with=None)
    assert "  topology:" in draft.text and "2 leaf switches over these nodes, 2-2 nodes each" in draft.text
    assert any(m.startswith("network.topology.max_switches") for m in draft.missing)
    path = tmp_path / "topo.yaml"
    path.write_text(draft.text)
    site = load_file(str(path))
    assert site.network.topology is not None and site.network.topology.plugin == "tree"


def test_parser_is_total_on_the_real_captures() -> None:
    assert_total(topology.parse, [c.body for c in CAPTURES])


def test_lines_of_no_switch_or_block_are_kept_bounded_and_never_taken() -> None:
    cap = next(c for c in WHOLE if c.path.stem == "tree-22.05.8-two-leaves")
    block = next(c for c in WHOLE if c.path.stem == "block-24.11.5-three-racks")
    mixed = topology.parse(cap.body + block.body + "SwitchName=leaf1 Level=0 Nodes=node9\n" + "junk\n" * 500)
    assert mixed.plugin == "tree" and [g.name for g in mixed.groups] == ["leaf1", "leaf2", "spine"]
    assert len(mixed.unparsed) == topology.MAX_UNPARSED   # the block lines, the second leaf1, the junk: first 100
    assert mixed.unparsed[0].startswith("BlockName=rack1")
    assert mixed.group_of()["node1"] == "leaf1" and "node9" not in mixed.group_of()
