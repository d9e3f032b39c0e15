"""Real captures through the deeper health checks: ``nvidia-smi -q`` (row remapping, clock
slowdowns, PCIe link), kernel logs with Xid lines, ``nvidia-smi nvlink -s``, and the sysfs
InfiniBand error counters - each through its parser against the values read off by hand
(``<name>.expected.json``, key ``health`` for nvidia-smi), then end to end: the real node script
through the local transport's shell with a stand-in that prints the capture."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clusterkit.nodes import health_parsers as HP
from clusterkit.nodes.script import SectionOutput
from clusterkit.nodes.smi_query import SmiQuery, parse_smi_query
from clusterkit.preflight import health
from clusterkit.preflight.catalogue import select_checks
from clusterkit.preflight.engine import SINGLE, Status, evaluate
from clusterkit.tooltext import ParseFailure
from tests.captures.capture import ROOT, Capture, captures, env_with, stand_in
from tests.conftest import REPO
from tests.preflight.check_helpers import expect

QUERIES = [c for c in captures("nvidia-smi") if "health" in c.expected]
KERNEL_LOGS = captures("kernel-log")
NVLINKS = captures("nvlink")
HEALTHY_BIN = REPO / "tests" / "sshlab" / "profiles" / "healthy" / "bin"
OUT = SectionOutput("s", "", "0")


def _ids(caps: list[Capture]) -> list[str]:
    return [c.name for c in caps]


def _node_script(stage: str, bin_dir: Path, sysroot: Path | None = None, **kw: object) -> dict[str, tuple[Status, str]]:
    """The real node script of ``stage``'s checks, run by sh with ``bin_dir`` first on PATH
    (then the healthy profile's tools); each health check's (status, message)."""
    check_set = select_checks(expect(stage=stage, storage=(), **kw))  # type: ignore[arg-type]
    env = env_with(bin_dir)
    env["PATH"] = f"{bin_dir}{os.pathsep}{HEALTHY_BIN}{os.pathsep}{os.environ['PATH']}"
    if sysroot is not None:
        env["CLUSTERKIT_SYSROOT"] = str(sysroot)
    out = subprocess.run(["sh", "-c", check_set.script()], env=env, capture_output=True, text=True, timeout=60).stdout
    return {r.check: (r.status, r.message) for r in evaluate(check_set, out)}


@pytest.mark.parametrize("cap", QUERIES, ids=_ids(QUERIES))
def test_smi_query_values_read_off_by_hand(cap: Capture) -> None:
    q = parse_smi_query(cap.body)
    assert isinstance(q, SmiQuery), q
    want = cap.expected["health"]
    assert len(q.gpus) == want["gpus"]
    assert [g.bus_id for g in q.gpus if (g.remap_pending or "") == "Yes"] == want["remap_pending"]
    assert sorted(g.bus_id for g in q.gpus if any(v == "Active" for _r, v in g.slowdowns)) == want["hw_slowdown"]
    assert [g.bus_id for g in q.gpus if g.width_current is not None and g.width_max is not None
            and g.width_current < g.width_max] == want["width_below_max"]


@pytest.mark.parametrize("cap", QUERIES, ids=_ids(QUERIES))
def test_smi_query_judged(cap: Capture) -> None:
    q = parse_smi_query(cap.body)
    assert isinstance(q, SmiQuery)
    want = cap.expected["health"]
    remap = health.judge_row_remap(q, OUT)
    assert remap.passed is not want["remap_pending"]
    for bus in want["remap_pending"]:
        assert f"GPU {bus}: row remapping pending" in remap.message
    clocks = health.judge_clocks(q, OUT)
    assert clocks.passed is not want["hw_slowdown"]
    assert all(bus in clocks.message for bus in want["hw_slowdown"])
    # the A10G at x8 of x16 fails; the idle RTX 4090s at Gen1 of Gen4 are not judged
    pcie = health.judge_pcie(q, OUT)
    assert pcie.passed is not want["width_below_max"]
    assert pcie.message == (", ".join(f"GPU {bus}: PCIe x8 of x16" for bus in want["width_below_max"])
                            or pcie.message)


def test_a_power_saving_gpu_is_not_failed_for_its_link_generation() -> None:
    (cap,) = [c for c in QUERIES if c.name == "nvidia-smi/gpud-q-535.154.05-4090-a"]
    q = parse_smi_query(cap.body)
    assert isinstance(q, SmiQuery)
    assert {(g.gen_current, g.gen_max, g.perf_state) for g in q.gpus} == {(1, 4, "P8")}
    assert health.judge_pcie(q, OUT).message == ("every GPU at its maximum link width (8 GPU(s) at a lower "
                                                 "generation while power-saving: not judged)")


@pytest.mark.parametrize("cap", [c for c in QUERIES if any(c.expected["health"][k] for k in
                                 ("remap_pending", "hw_slowdown", "width_below_max"))], ids=lambda c: c.name)
def test_smi_query_end_to_end_through_the_node_script(cap: Capture, tmp_path: Path) -> None:
    stand_in(tmp_path / "bin", "nvidia-smi", cap.body, by_args={"-q": cap.body}, other=str(HEALTHY_BIN / "nvidia-smi"))
    got = _node_script(SINGLE, tmp_path / "bin")
    want = cap.expected["health"]
    assert got["gpu.row_remap"][0] is (Status.FAIL if want["remap_pending"] else Status.OK)
    assert got["gpu.clocks"][0] is (Status.FAIL if want["hw_slowdown"] else Status.OK)
    assert got["gpu.pcie"][0] is (Status.FAIL if want["width_below_max"] else Status.OK)


@pytest.mark.parametrize("cap", KERNEL_LOGS, ids=_ids(KERNEL_LOGS))
def test_xids_read_off_by_hand(cap: Capture) -> None:
    log = HP.parse_xid_log(cap.body)
    assert isinstance(log, HP.KernelLog), log
    assert [[e.pci, e.xid] for e in log.events] == cap.expected["xids"]
    assert health.judge_xid_hardware(log, OUT).passed is not cap.expected["hardware"]


@pytest.mark.parametrize("cap", KERNEL_LOGS, ids=_ids(KERNEL_LOGS))
def test_xids_end_to_end_through_the_node_script(cap: Capture, tmp_path: Path) -> None:
    stand_in(tmp_path / "bin", "dmesg", cap.body)
    got = _node_script(SINGLE, tmp_path / "bin")
    first = cap.expected["xids"][0]
    if cap.expected["hardware"]:
        assert got["gpu.xid"][0] is Status.FAIL and f"Xid {first[1]} on GPU {first[0]}" in got["gpu.xid"][1]
    else:
        assert got["gpu.xid"] == (Status.OK, "no hardware Xid since boot (dmesg)")
        assert got["gpu.xid_other"][0] is Status.WARN
        assert got["gpu.xid_other"][1].startswith("Xid 13 on GPU 0000:cb:00 x3: graphics engine exception")


@pytest.mark.parametrize("cap", NVLINKS, ids=_ids(NVLINKS))
def test_nvlink_read_off_by_hand_and_judged(cap: Capture) -> None:
    st = HP.parse_nvlink(cap.body)
    assert isinstance(st, HP.NvlinkStatus), st
    got = {str(g.index): {"links": len(g.links), "inactive": [k.link for k in g.links if k.state == "inactive"]}
           for g in st.gpus}
    assert got == cap.expected["gpus"]
    verdict = health.judge_nvlink(st, OUT)
    down = {i: g["inactive"] for i, g in cap.expected["gpus"].items() if g["inactive"]}
    assert verdict.passed is not bool(down)
    for gpu, links in down.items():
        assert f"GPU {gpu}: link {','.join(map(str, links))} inactive" in verdict.message


@pytest.mark.parametrize("cap", NVLINKS, ids=_ids(NVLINKS))
def test_nvlink_end_to_end_through_the_node_script(cap: Capture, tmp_path: Path) -> None:
    stand_in(tmp_path / "bin", "nvidia-smi", cap.body, by_args={"nvlink -s": cap.body},
             other=str(HEALTHY_BIN / "nvidia-smi"))
    status, _msg = _node_script(SINGLE, tmp_path / "bin")["gpu.nvlink"]
    inactive = any(g["inactive"] for g in cap.expected["gpus"].values())
    assert status is (Status.FAIL if inactive else Status.OK)


def test_ib_counters_of_the_sysfs_capture_read_twice(tmp_path: Path) -> None:
    """The real tree as the node's sysroot: the counters as read off by hand, steady between reads."""
    (cap,) = captures("sysfs")
    tree = ROOT / "sysfs" / cap.path.stem
    rails = tuple(h for h in cap.expected["counters"] if h != "mlx5_bond_0")
    got = _node_script("multi-node", tmp_path / "bin", sysroot=tree, hcas=rails)
    assert got["ib.counters"] == (Status.OK, f"error counters steady on {len(rails)} port(s) in 2 s")
    text = subprocess.run(["sh", "-c", health.H.ib_counters_section().command], capture_output=True, text=True,
                          env={**os.environ, "CK_ROOT": str(tree)}, timeout=30).stdout
    reads = HP.parse_ib_counters(text)
    assert isinstance(reads, HP.CounterReads)
    by_hca = {h: {c: reads.first[(h, 1, c)] for c in HP.IB_COUNTERS} for h in cap.expected["counters"]}
    assert by_hca == cap.expected["counters"]
    assert reads.first == reads.second and reads.interval_s == 2


@pytest.mark.parametrize("text", ["", "garbage\x1b[31m", "NVRM: Xid (PCI:zz): 79, x", "GPU 0: X\n Link 0: maybe",
                                  "read 1\n/sys/class/infiniband/m/ports/1/counters/symbol_error:1"])
def test_health_parsers_are_total(text: str) -> None:
    for parse in (parse_smi_query, HP.parse_xid_log, HP.parse_nvlink, HP.parse_ib_counters):
        got = parse(text)
        if isinstance(got, ParseFailure):
            assert got.raw == text


@pytest.mark.parametrize("cap", QUERIES, ids=_ids(QUERIES))
def test_the_node_keeps_only_the_blocks_read_and_they_parse_the_same(cap: Capture, tmp_path: Path) -> None:
    """The section sends back a fifth of ``nvidia-smi -q`` (the blocks the checks read): what
    the checks get from it is what they get from the whole capture."""
    stand_in(tmp_path / "bin", "nvidia-smi", cap.body)
    section = health.H.smi_query_section(10)
    out = subprocess.run(["sh", "-c", section.command], env=env_with(tmp_path / "bin"), capture_output=True,
                         text=True, timeout=30).stdout
    assert parse_smi_query(out) == parse_smi_query(cap.body)
    if len(cap.body) > 20_000:
        assert len(out) < len(cap.body) / 4
