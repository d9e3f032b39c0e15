"""The estimator against DeepSpeed's own functions.

deepspeed is in the test extra (a CPU install, ``DS_BUILD_OPS=0``), so this runs wherever the
README's test command does; the importorskip only spares a bare checkout without the extra.
The hand-worked figures in test_figures.py check the same numbers by hand.
"""

from __future__ import annotations

import itertools

import pytest

from clusterkit.sizing.model import zero2_model_states, zero3_model_states

stage12 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
stage3 = pytest.importorskip("deepspeed.runtime.zero.stage3")

SIZES = [(350_000_000, 51_463_168), (3_000_000_000, 102_400_000), (7_000_000_000, 131_072_000),
         (176_000_000_000, 3_596_615_680), (176_247_271_424, 3_596_615_680), (1_000_000_000_001, 7)]
LAYOUTS = [(1, 1), (8, 1), (8, 2), (4, 3), (8, 16), (8, 48), (6, 7)]


@pytest.mark.parametrize("params, largest", SIZES)
def test_matches_deepspeed(params: int, largest: int) -> None:
    for (gpn, nodes), abf in itertools.product(LAYOUTS, (1.5, 1.0, 1.25)):
        for offload in (True, False):
            assert zero2_model_states(params, gpn, nodes, offload, abf) == \
                stage12.estimate_zero2_model_states_mem_needs(params, gpn, nodes, offload, abf)
        for offload, offload_params, zero_init in itertools.product((True, False), repeat=3):
            assert zero3_model_states(params, largest, gpn, nodes, offload, offload_params, zero_init, abf) == \
                stage3.estimate_zero3_model_states_mem_needs(
                    params, largest, gpn, nodes, offload, offload_params, zero_init, abf)
