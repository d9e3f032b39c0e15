"""Real InfiniBand/RDMA port counter files (tests/data/captures/ib-counters) through
``parse_ib_counters`` and preflight's ``ib.counters``.

The captures are one ``grep`` over the counter files, as the node section prints each of its two
reads; the section's text is made of the capture twice (``read 1``, the capture, ``read 2``, the
capture again): one real moment, read twice.  ``<name>.expected.json`` holds the counters of the
section's three (``symbol_error``, ``link_downed``, ``port_rcv_errors``) read off by hand, None
where the file holds no number, and the verdict they should give.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from clusterkit.nodes import health_parsers as HP
from clusterkit.nodes import health_sections as HS
from clusterkit.nodes.health_sections import ib_counters_section
from clusterkit.nodes.script import SectionOutput
from clusterkit.preflight import health
from tests.captures.capture import Capture, captures
from tests.preflight.check_helpers import expect

CAPTURES = captures("ib-counters")


def section_text(body: str) -> str:
    return f"read 1\n{body}read 2 after 2 s\n{body}"


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_counters_read_off_by_hand_and_judged(cap: Capture) -> None:
    reads = HP.parse_ib_counters(section_text(cap.body))
    assert isinstance(reads, HP.CounterReads), reads
    got: dict[str, dict[str, int | None]] = {}
    for (hca, port, name), value in reads.first.items():
        if name in HP.IB_COUNTERS:
            got.setdefault(f"{hca}:{port}", {})[name] = value
    assert got == cap.expected["counters"]
    hcas = tuple(sorted({k.split(":")[0] for k in got}))
    verdict = health.counters_judge(expect(hcas=hcas))(reads, SectionOutput("ib_counters", "", "0"))
    assert verdict.passed and verdict.message == cap.expected["verdict"]


def test_a_port_without_numbers_is_named_beside_the_watched_ones() -> None:
    """A port of the capture (no PMA) next to one whose counters are numbers: the verdict counts
    only the watched port and names the other."""
    (cap,) = CAPTURES
    numbers = "/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error:0\n"   # a made-up readable port
    reads = HP.parse_ib_counters(section_text(cap.body + numbers))
    assert isinstance(reads, HP.CounterReads)
    verdict = health.counters_judge(expect(hcas=("i40iw0", "mlx5_0")))(reads, SectionOutput("ib_counters", "", "0"))
    assert verdict.message == "error counters steady on 1 port(s) in 2 s; not readable on i40iw0 port 1"


def _run_section(root: Path) -> tuple[str, float]:
    """The node script's ib_counters section, run by sh with ``root`` as the node's root: its
    output and how long it took."""
    section = ib_counters_section()
    start = time.monotonic()
    proc = subprocess.run(["sh", "-c", section.command], env={**os.environ, "CK_ROOT": str(root)},
                          capture_output=True, text=True, timeout=30)
    return proc.stdout, time.monotonic() - start


def test_a_node_without_counters_is_read_once_without_the_wait(tmp_path: Path) -> None:
    """No counter files at the first read: nothing to compare, so no wait for a second one; the
    verdict is the one two empty reads gave."""
    out, took = _run_section(tmp_path)
    assert out == "read 1\n\nread 2\n" and took < HS.COUNTER_INTERVAL_S, (out, took)
    reads = HP.parse_ib_counters(out)
    assert isinstance(reads, HP.CounterReads) and reads.first == reads.second == {}
    verdict = health.counters_judge(expect(hcas=("mlx5_0",)))(reads, SectionOutput("ib_counters", out, "0"))
    assert verdict.passed and verdict.message == "no error counters readable for the configured HCAs"


def test_a_node_with_counters_reads_them_twice_the_interval_apart(tmp_path: Path) -> None:
    counters = tmp_path / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters"
    counters.mkdir(parents=True)
    for name in HP.IB_COUNTERS:
        (counters / name).write_text("0\n")
    out, took = _run_section(tmp_path)
    assert f"read 2 after {HS.COUNTER_INTERVAL_S} s\n" in out and took >= HS.COUNTER_INTERVAL_S, (out, took)
    reads = HP.parse_ib_counters(out)
    assert isinstance(reads, HP.CounterReads) and reads.interval_s == HS.COUNTER_INTERVAL_S
    assert reads.first == reads.second == {("mlx5_0", 1, name): 0 for name in HP.IB_COUNTERS}
