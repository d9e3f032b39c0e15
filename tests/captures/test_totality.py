"""The real captures, cut, spliced and shuffled, never make a parser raise (tests/totality.py)."""

from __future__ import annotations

from clusterkit.nodes import device_parsers as D
from clusterkit.nodes import health_parsers as H
from clusterkit.nodes.smi_query import parse_smi_query
from clusterkit.sites import slurm_text as T
from tests.captures.capture import captures
from tests.totality import assert_total


def test_device_parsers_are_total_on_the_real_captures() -> None:
    assert_total(D.parse_ib, [c.body for c in captures("ibstat")])
    assert_total(D.parse_cuda_version, [c.body for c in captures("nvidia-smi")])


def test_health_parsers_are_total_on_the_real_captures() -> None:
    assert_total(parse_smi_query, [c.body for c in captures("nvidia-smi")])
    assert_total(H.parse_xid_log, [c.body for c in captures("kernel-log")])
    assert_total(H.parse_nvlink, [c.body for c in captures("nvlink")])


def test_slurm_parsers_are_total_on_the_real_captures() -> None:
    bodies = [c.body for c in captures("scontrol")]
    for parse in (T.parse_nodes, T.parse_partitions, T.parse_config):
        assert_total(parse, bodies)
