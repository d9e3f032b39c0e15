"""The deeper health checks end to end over SSH: ``clusterkit preflight`` against real sshd
nodes whose fake tools print what real nodes printed (the profiles are built from the captures
in tests/data/captures), one node per fault and a healthy one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CLI

from .conftest import groups_by_node, write_site

pytestmark = pytest.mark.sshlab

HEALTH_LAB = {"node01": "healthy", "node02": "remap_pending", "node03": "xid79", "node04": "pcie_x8",
              "node05": "ib_symbol_errors", "node06": "nvlink_down"}

EXPECTED = {
    "node02": {"gpu.row_remap": "GPU 00000000:86:00.0: row remapping pending (reset the GPU)"},
    "node03": {"gpu.xid": "Xid 79 on GPU 0000:91:00: GPU has fallen off the bus (PCIe link lost)"},
    "node04": {"gpu.pcie": "GPU 00000000:A8:00.0: PCIe x8 of x16"},
    "node05": {"ib.counters": "error counters rising: mlx5_2 port 1: symbol_error +7 in 2 s"},
    "node06": {"gpu.nvlink": "GPU 2: link 7 inactive"},
}


def _fails(node: dict[str, Any]) -> dict[str, str]:
    return {c["check"]: c["message"] for c in node["checks"] if c["status"] == "fail"}


def test_each_faulty_node_fails_its_health_check_and_the_healthy_one_passes(sshlab_factory: Any,
                                                                            tmp_path: Path) -> None:
    lab = sshlab_factory(HEALTH_LAB)
    site = write_site(tmp_path / "health.yaml", lab, nodelist="node[01-06]", command_timeout_s=20)
    ck = CLI().bind(process=True, wrap=lab.wrap, env={**lab.env(), "SSH_AUTH_SOCK": None})
    proc = ck("preflight", "--site", str(site), "--stage", "multi-node", "--json")
    assert proc.code == 1, proc.out + proc.err
    report = json.loads(proc.out)
    nodes = groups_by_node(report)
    assert report["failed"] == "node[02-06]"
    assert nodes["node01"]["status"] == "ok"
    assert {h: _fails(n) for h, n in nodes.items() if h != "node01"} == EXPECTED
    plain = ck("preflight", "--site", str(site), "--stage", "multi-node")
    for host, fails in EXPECTED.items():
        (check, message), = fails.items()
        assert any(host in line and f"{check}: {message}" in line for line in plain.out.splitlines()), plain.out
