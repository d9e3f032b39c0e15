"""The human renderings of a report: the terminal table (with colour) and the progress bar."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from clusterkit.cli import output
from clusterkit.cli import preflight as cli
from clusterkit.preflight.engine import CheckResult, Severity, Status
from clusterkit.preflight.report import NodeResult, Report

DOWN = CheckResult("ib.ports", Status.FAIL, Severity.ERROR, "mlx5_3 port 1 DOWN (Disabled)")


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120, color_system="standard", highlight=False)
    monkeypatch.setattr(output, "_out", console)
    monkeypatch.setattr(output, "_err", console)
    return buf


def sample() -> Report:
    hosts = [f"gpu{i:02d}" for i in range(1, 9)]
    r = Report("ib-h100", "multi-node", "ssh", hosts, notes=["a note"])
    for h in hosts[:6]:
        r.add(NodeResult(h, True, ()))
    r.add(NodeResult("gpu07", True, (DOWN,)))
    r.add(NodeResult("gpu08", False, error="connection refused by 127.2.0.1:22", error_kind="refused"))
    r.elapsed_s = 1.25
    return r


def test_terminal_table(terminal: io.StringIO) -> None:
    cli._render(sample())
    text = terminal.getvalue()
    assert "\x1b[" in text  # coloured on a terminal
    lines = text.splitlines()
    assert any("unreachable" in ln and "gpu08" in ln and "connection refused by 127.2.0.1:22" in ln for ln in lines)
    assert any("failed" in ln and "gpu07" in ln and "ib.ports: mlx5_3 port 1 DOWN (Disabled)" in ln for ln in lines)
    assert any("6 nodes: gpu[01-06]" in ln for ln in lines)
    assert "preflight ib-h100 (multi-node, ssh): 8 of 8 nodes checked in 1.2 s: 6 ok, 1 failed, 1 unreachable" in text


def test_progress_bar_counts_bad_nodes(terminal: io.StringIO) -> None:
    progress = cli._Progress(enabled=True)
    report = sample()
    progress.start(list(report.hosts))
    for node in report.nodes:
        progress.advance(node)
    assert progress._bad == 2
    progress.stop()
    assert "preflight" in terminal.getvalue()


def test_no_progress_when_not_a_terminal(terminal: io.StringIO) -> None:
    progress = cli._Progress(enabled=False)
    progress.start(["a"])
    progress.advance(sample().nodes[0])
    progress.stop()
    assert terminal.getvalue() == ""
