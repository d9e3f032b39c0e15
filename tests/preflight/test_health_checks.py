"""The deeper health checks on the lab's node profiles (the node script run by a real shell, as
the lab's ForceCommand runs it; no SSH): each fault profile fails its own check, naming the GPU
or port, and nothing else; the healthy profile passes them all."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clusterkit.nodes.health_parsers import KernelLog, parse_xid_log
from clusterkit.nodes.script import SectionOutput
from clusterkit.preflight.catalogue import select_checks
from clusterkit.preflight.engine import SINGLE, Status, evaluate
from clusterkit.preflight.health import judge_xid_hardware, judge_xid_other
from tests.preflight.check_helpers import PROFILES, Judged, expect, failures, judge_profiles, results

HEALTH = {"gpu.row_remap", "gpu.pcie", "gpu.clocks", "gpu.nvlink", "gpu.xid", "gpu.xid_other", "ib.counters"}

FAULTS = [
    ("remap_pending", "gpu.row_remap", "GPU 00000000:86:00.0: row remapping pending (reset the GPU)"),
    ("pcie_x8", "gpu.pcie", "GPU 00000000:A8:00.0: PCIe x8 of x16"),
    ("xid79", "gpu.xid", "Xid 79 on GPU 0000:91:00: GPU has fallen off the bus (PCIe link lost)"),
    ("ib_symbol_errors", "ib.counters", "error counters rising: mlx5_2 port 1: symbol_error +7 in 2 s"),
    ("nvlink_down", "gpu.nvlink", "GPU 2: link 7 inactive"),
]


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> Judged:
    """The default expectations judged once on the healthy profile and each fault's."""
    return judge_profiles(select_checks(expect()), ["healthy", *(f[0] for f in FAULTS)],
                          tmp_path_factory.mktemp("profiles"))


def test_healthy_node_passes_the_health_checks(judged: Judged) -> None:
    res = judged.by_profile["healthy"]
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
                                                          judged: Judged) -> None:
    res = judged.by_profile[profile]
    assert failures(res) == {check: message}


def test_single_node_stage_runs_the_gpu_checks_without_the_counters(tmp_path: Path) -> None:
    res = results(select_checks(expect(stage=SINGLE)), "remap_pending", tmp_path)
    assert "ib.counters" not in res
    assert failures(res) == {"gpu.row_remap": "GPU 00000000:86:00.0: row remapping pending (reset the GPU)"}


def _with_tools(tmp_path: Path, tools: dict[str, str]) -> dict[str, tuple[Status, str]]:
    """The healthy profile with stand-ins (shell text each) first on PATH; the Xid checks' results."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n# stand-in {name}\n{body}\n")
        (bin_dir / name).chmod(0o755)
    check_set = select_checks(expect(stage=SINGLE, storage=()))
    env = dict(os.environ, PATH=f"{bin_dir}:{PROFILES / 'healthy' / 'bin'}:{os.environ['PATH']}")
    out = subprocess.run(["sh", "-c", check_set.script()], env=env, capture_output=True, text=True, timeout=60).stdout
    return {r.check: (r.status, r.message) for r in evaluate(check_set, out) if r.check.startswith("gpu.xid")}


DMESG_DENIED = 'echo "dmesg: read kernel buffer failed: Operation not permitted"; exit 1'


def test_a_kernel_log_this_user_may_not_read_is_said_not_passed_silently(tmp_path: Path) -> None:
    # journalctl without the right to the system journal shows the user's own messages only
    got = _with_tools(tmp_path, {"dmesg": DMESG_DENIED, "journalctl": 'echo "Hint: You are currently not seeing '
                                 'messages from other users and the system."'})
    reason = "dmesg: read kernel buffer failed: Operation not permitted"
    assert got == {"gpu.xid": (Status.OK, f"kernel log not readable here ({reason}): Xids not checked"),
                   "gpu.xid_other": (Status.WARN, f"kernel log not readable here: {reason}")}


def test_the_journal_is_read_where_dmesg_is_not(tmp_path: Path) -> None:
    line = "Oct 30 09:49:36 pc kernel: NVRM: Xid (PCI:0000:03:00): 79, pid='<unknown>', GPU has fallen off the bus."
    got = _with_tools(tmp_path, {"dmesg": DMESG_DENIED, "journalctl": f"echo \"{line}\""})
    assert got["gpu.xid"] == (Status.FAIL, "Xid 79 on GPU 0000:03:00: GPU has fallen off the bus (PCIe link lost)")


def test_an_xid_line_in_no_known_form_is_reported_not_a_reason_to_stop_reading() -> None:
    text = ("[ 1843.308145] NVRM: Xid (PCI:0000:b3:00.0): 79\n"   # cut after the number: still Xid 79
            "[ 1843.308146] NVRM: Xid (PCI:zz): 79, x\n"           # no address: kept as unreadable
            "[ 1843.308147] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up\n")
    log = parse_xid_log(text)
    assert isinstance(log, KernelLog)
    assert [(e.pci, e.xid) for e in log.events] == [("0000:b3:00.0", 79)]
    out = SectionOutput("xid", text, "0")
    assert judge_xid_hardware(log, out).message.startswith("Xid 79 on GPU 0000:b3:00.0: GPU has fallen off")
    other = judge_xid_other(log, out)
    assert not other.passed
    assert other.message == "an Xid line clusterkit cannot read: '[ 1843.308146] NVRM: Xid (PCI:zz): 79, x'"
