"""The deeper health checks on the lab's node profiles (the node script run by a real shell, as
the lab's ForceCommand runs it; no SSH): each fault profile fails its own check, naming the GPU
or port, and nothing else; the healthy profile passes them all."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.preflight.catalogue import select_checks
from clusterkit.preflight.engine import SINGLE, Status
from tests.preflight.test_checks import expect, failures, results

HEALTH = {"gpu.row_remap", "gpu.pcie", "gpu.clocks", "gpu.nvlink", "gpu.xid", "gpu.xid_other", "ib.counters"}

FAULTS = [
    ("remap_pending", "gpu.row_remap", "GPU 00000000:86:00.0: row remapping pending (reset the GPU)"),
    ("pcie_x8", "gpu.pcie", "GPU 00000000:A8:00.0: PCIe x8 of x16"),
    ("xid79", "gpu.xid", "Xid 79 on GPU 0000:91:00: GPU has fallen off the bus (PCIe link lost)"),
    ("ib_symbol_errors", "ib.counters", "error counters rising: mlx5_2 port 1: symbol_error +7 in 2 s"),
    ("nvlink_down", "gpu.nvlink", "GPU 2: link 7 inactive"),
]


def test_healthy_node_passes_the_health_checks(tmp_path: Path) -> None:
    res = results(select_checks(expect()), "healthy", tmp_path)
    assert set(res) >= HEALTH
    assert {k: (r.status, r.message) for k, r in res.items() if k in HEALTH} == {
        "gpu.row_remap": (Status.OK, "no row remapping or page retirement pending"),
        "gpu.pcie": (Status.OK, "every GPU at its maximum link width"),
        "gpu.clocks": (Status.OK, "no hardware slowdown"),
        "gpu.nvlink": (Status.OK, "8 GPUs, every NVLink up"),
        "gpu.xid": (Status.OK, "no hardware Xid since boot (dmesg)"),
        "gpu.xid_other": (Status.OK, "no other Xid since boot"),
        "ib.counters": (Status.OK, "error counters steady on 8 port(s) in 2 s"),
    }


@pytest.mark.parametrize(("profile", "check", "message"), FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_fails_its_check_naming_the_gpu_or_port(profile: str, check: str, message: str,
                                                          tmp_path: Path) -> None:
    res = results(select_checks(expect()), profile, tmp_path)
    assert failures(res) == {check: message}


def test_single_node_stage_runs_the_gpu_checks_without_the_counters(tmp_path: Path) -> None:
    res = results(select_checks(expect(stage=SINGLE)), "remap_pending", tmp_path)
    assert "ib.counters" not in res
    assert failures(res) == {"gpu.row_remap": "GPU 00000000:86:00.0: row remapping pending (reset the GPU)"}
