"""``nvidia-smi nvlink -e`` (tests/data/captures/nvlink-errors) through ``parse_nvlink_errors``
and preflight's ``gpu.nvlink_errors``: the counters read off by hand (``<name>.expected.json``),
then the real node script with a stand-in ``nvidia-smi`` that prints the capture at both reads.

A capture shows one moment; a counter rising needs two.  The rising case is therefore the
capture at the first read and, at the second, the capture with one counter raised (a changed
copy, made in this file and named so); nothing here is presented as a second real read.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from clusterkit.nodes import health_parsers as HP
from clusterkit.nodes.script import SectionOutput
from clusterkit.preflight import health
from clusterkit.preflight.engine import SINGLE, Status
from clusterkit.tooltext import ParseFailure
from tests.captures.capture import Capture, captures, stand_in
from tests.captures.test_health_captures import HEALTHY_BIN, _node_script

CAPTURES = captures("nvlink-errors")
OUT = SectionOutput("nvlink_e", "", "0")


def two_reads(first: str, second: str) -> str:
    return f"read 1\n{first}read 2 after 2 s\n{second}"


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_counters_read_off_by_hand(cap: Capture) -> None:
    reads = HP.parse_nvlink_errors(two_reads(cap.body, cap.body))
    assert isinstance(reads, HP.NvlinkErrorReads), reads
    got: dict[str, dict[str, dict[str, int | None]]] = {}
    for (gpu, link, name), value in reads.first.items():
        got.setdefault(str(gpu), {}).setdefault(str(link), {})[name] = value
    assert got == cap.expected["counters"]
    assert reads.first == reads.second and reads.interval_s == 2
    links = sum(len(v) for v in cap.expected["counters"].values())
    assert health.judge_nvlink_errors(reads, OUT).message == f"NVLink error counters steady on {links} link(s) in 2 s"


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_end_to_end_through_the_node_script(cap: Capture, tmp_path: Path) -> None:
    stand_in(tmp_path / "bin", "nvidia-smi", cap.body, by_args={"nvlink -e": cap.body},
             other=str(HEALTHY_BIN / "nvidia-smi"))
    links = sum(len(v) for v in cap.expected["counters"].values())
    got = _node_script(SINGLE, tmp_path / "bin")
    assert got["gpu.nvlink_errors"] == (Status.OK, f"NVLink error counters steady on {links} link(s) in 2 s")


def _rising_stand_in(bin_dir: Path, first: str, second: str) -> None:
    """A stand-in ``nvidia-smi`` (named so): ``nvlink -e`` prints ``first`` once, then ``second``;
    any other call goes to the healthy profile's stand-in."""
    bin_dir.mkdir(parents=True)
    (bin_dir / "first").write_text(first)
    (bin_dir / "second").write_text(second)
    tool = bin_dir / "nvidia-smi"
    tool.write_text("#!/bin/bash\n# stand-in: a captured nvlink -e, then a changed copy of it\n"
                    f'if [ "$*" != "nvlink -e" ]; then exec {HEALTHY_BIN / "nvidia-smi"} "$@"; fi\n'
                    f'if [ -e {bin_dir / "seen"} ]; then exec cat {bin_dir / "second"}; fi\n'
                    f': > {bin_dir / "seen"}; exec cat {bin_dir / "first"}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_a_counter_rising_between_the_reads_fails_naming_gpu_link_and_counter(cap: Capture, tmp_path: Path) -> None:
    raised = cap.body.replace("Link 1: CRC Errors: 0", "Link 1: CRC Errors: 5")   # the changed copy
    assert raised != cap.body
    _rising_stand_in(tmp_path / "bin", cap.body, raised)
    got = _node_script(SINGLE, tmp_path / "bin")
    assert got["gpu.nvlink_errors"] == (Status.FAIL, "NVLink errors rising: GPU 0 link 1: CRC Errors +5 in 2 s")


def test_an_nvidia_smi_without_the_report_is_said_so(tmp_path: Path) -> None:
    """The healthy profile's stand-in answers ``nvlink -e`` as nvidia-smi answers arguments it
    does not know: no counters to judge, and the verdict says why (no wait either)."""
    got = _node_script(SINGLE, tmp_path / "bin")
    status, message = got["gpu.nvlink_errors"]
    assert status is Status.OK
    assert message == ("NVLink error counters not reported by nvidia-smi (Invalid combination of input arguments. "
                       "Please run 'nvidia-smi -h' for help.)")


def test_a_node_without_nvlink_prints_one_empty_read() -> None:
    reads = HP.parse_nvlink_errors("read 1\n\n")
    assert isinstance(reads, HP.NvlinkErrorReads) and not reads.first
    assert health.judge_nvlink_errors(reads, OUT).message == "no NVLink error counters (a GPU without NVLink)"


@pytest.mark.parametrize("text", ["", "garbage\x1b[31m", "read 1\nGPU 0: X\n Link 0: maybe", "GPU 0: X (UUID: U)\n",
                                  "read 1\nGPU 0: H100 (UUID: U)\n Link 0: CRC Errors: 0\n",
                                  "read 1\nLink 0: CRC Errors: 0\nread 2 after 2 s\n"])
def test_the_parser_is_total(text: str) -> None:
    got = HP.parse_nvlink_errors(text)
    assert isinstance(got, ParseFailure) and got.raw == text


def test_the_section_waits_only_where_there_are_links() -> None:
    command = health.H.nvlink_errors_section(10).command
    assert "case \"$a\" in *'Link '*) sleep 2;" in command
