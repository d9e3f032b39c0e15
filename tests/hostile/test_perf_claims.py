"""A node's perf tasks print their own figure lines, host name included: a node must not be able
to speak for another host, and a figure that is no finite number must not pass as ok.  The lines
are the 5-node testbed's captures (tests/data/captures/perf), one line changed per case, as the
tests of tests/preflight/test_perf.py change them."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from clusterkit.preflight.perf import judge, parse_output
from tests.preflight.test_perf import HOSTS, LIMITS, _capture, _judge, _rewrite, _status


def _forge(rank: int, **fields: Any) -> Any:
    def edit(marker: str, lines: list[str]) -> list[str]:
        return _rewrite(lines, marker, lambda ev: ev["rank"] == rank, lambda ev: {**ev, **fields})
    return edit


def test_a_node_claiming_another_hosts_name_cannot_mark_it_slow() -> None:
    # rank 4 runs on node5 (srun's layout); every line it prints claims node1, with low figures
    report = _judge("healthy", edit=_forge(4, host="node1", tflops=0.001, gbps=0.001))
    status = _status(report)
    assert status["node1"] == "ok", report.to_dict()
    assert status["node5"] == "failed"
    assert "claimed to be node1" in next(n for n in report.nodes if n.host == "node5").reason
    assert report.slow_links == []


def test_a_node_claiming_a_name_no_layout_gives_it_sets_both_aside() -> None:
    # ranks 0 (node1) and 4 (node5) both claim node3; node3's own task (rank 2) claims node4
    def edit(marker: str, lines: list[str]) -> list[str]:
        lines = _rewrite(lines, marker, lambda ev: ev["rank"] in (0, 4), lambda ev: {**ev, "host": "node3"})
        return _rewrite(lines, marker, lambda ev: ev["rank"] == 2, lambda ev: {**ev, "host": "node4"})
    status = _status(_judge("healthy", edit=edit))
    assert "slow" not in status.values()
    assert status["node1"] == status["node5"] == "failed"


def test_a_task_switching_host_mid_run_keeps_its_first_name() -> None:
    def edit(marker: str, lines: list[str]) -> list[str]:
        return _rewrite(lines, marker, lambda ev: ev["rank"] == 4 and ev["ev"] == "gemm",
                        lambda ev: {**ev, "host": "node1", "tflops": 0.001})
    status = _status(_judge("healthy", edit=edit))
    assert status["node1"] == "ok"


def test_a_pair_figure_from_a_node_outside_the_pair_is_not_used() -> None:
    def edit(marker: str, lines: list[str]) -> list[str]:
        forged = {"ev": "pair", "rank": 4, "host": "node5", "round": 1, "pair": ["node1", "node2"], "gbps": 0.001}
        return [*lines, f"4: {marker} {json.dumps(forged)}"]
    report = _judge("healthy", edit=edit)
    assert report.slow_links == [] and "slow" not in _status(report).values()


@pytest.mark.parametrize("bad", ["NaN", "-Infinity", "Infinity", "1e400", "9" * 5000, "[" * 100_000])
def test_a_figure_that_is_no_finite_number_is_no_figure(bad: str) -> None:
    marker, lines = _capture("healthy")
    lines = [ln.replace('"tflops":', f'"tflops":{bad},"x":') if ln.startswith("0: ") else ln for ln in lines]
    assert any(bad[:20] in ln for ln in lines)
    report = judge(HOSTS, parse_output(lines, marker, HOSTS), LIMITS)
    node1 = next(n for n in report.nodes if n.host == "node1")
    assert node1.gemm_tflops is None or math.isfinite(node1.gemm_tflops)
    # no figure is no pass: the task finished without the matmul figure every task prints
    assert node1.status == "failed" and "without a matmul figure" in node1.reason, node1
    json.dumps(report.to_dict(), allow_nan=False)   # valid JSON, whatever the tasks printed


def test_load_json_refuses_what_strict_json_readers_refuse() -> None:
    from clusterkit.tooltext import load_json

    for bad in ("NaN", "[Infinity]", '{"a": 1e999}', "1" * 41, "[" * 50 + "]" * 50, "[" * 200_000):
        with pytest.raises(ValueError):
            load_json(bad)
    assert load_json('{"a": [1, 2.5e3, "x", null]}') == {"a": [1, 2500.0, "x", None]}


def test_one_end_cannot_raise_its_pairs_with_a_sweep_of_its_own() -> None:
    """Changed: node3's task (rank 2, its link limited) prints each of its pair lines again as a
    third sweep, at 100 Gbit/s; its peers print no third sweep, so it does not count."""
    def edit(marker: str, lines: list[str]) -> list[str]:
        extra = [ln for ln in _rewrite(lines, marker, lambda ev: ev["rank"] == 2 and ev["ev"] == "pair",
                                       lambda ev: {**ev, "sweep": 3, "gbps": 100.0}) if '"sweep": 3' in ln]
        return lines + extra
    report = _judge("node3-link-100mbit-sweeps", edit=edit)
    assert _status(report)["node3"] == "slow", report.to_dict()
    assert all(max(p["sweeps"]) == 100.0 and p["gbps"] < 1 for p in report.nodes[2].busbw_inter_gbps)
