"""Model-states memory, checked against figures worked out by hand from DeepSpeed's formulas.

The formulas (DeepSpeed 0.19.8):

* ``stage_1_and_2.py::estimate_zero2_model_states_mem_needs``
  offload:    gpu = 2P;                   cpu = P * max(4 * total_gpus, 16) * abf
  no offload: gpu = 2P + int(18P / total_gpus); cpu = P * 4 * gpus_per_node * abf
* ``stage3.py::estimate_zero3_model_states_mem_needs`` (L = largest layer params, f = 1 / nodes)
  offload optimizer + params: gpu = 4L;                         cpu = P*18*f*abf (zero_init) | P*max(4*gpn, 18f)*abf
  offload optimizer only:     gpu = 4L + int(2P / total_gpus);  cpu = P*16*f*abf (zero_init) | P*max(4*gpn, 16f)*abf
  no offload:                 gpu = 4L + int(18P / total_gpus); cpu = L*4*gpn*abf (zero_init) | P*4*gpn*abf

``abf`` (``additional_buffer_factor``) is 1.5 unless a test says otherwise.  Every expected value
below is a literal with its arithmetic in the comment, never a call to the code under test.
"""

from __future__ import annotations

import pytest

from clusterkit.errors import InputError
from clusterkit.sizing.inputs import parse_size
from clusterkit.sizing.model import (
    ddp_model_states,
    default_largest_layer,
    megatron_model_states,
    zero1_model_states,
    zero2_model_states,
    zero3_model_states,
)

# --- the three models -------------------------------------------------------------------------
# 3B: an OpenLLaMA-3B-like shape; largest layer = embedding 32000 x 3200 = 102_400_000
P3, L3 = 3_000_000_000, 102_400_000
# 7B: a LLaMA-7B-like shape; largest layer = embedding 32000 x 4096 = 131_072_000
P7, L7 = 7_000_000_000, 131_072_000
# 176B: a BLOOM-like shape; largest layer = embedding 250880 x 14336 = 3_596_615_680
P176, L176 = 176_000_000_000, 3_596_615_680


# --- 3B on one node of 8 GPUs -----------------------------------------------------------------


def test_3b_zero2_one_node() -> None:
    # no offload: gpu = 2*3e9 + int(18*3e9/8) = 6_000_000_000 + 6_750_000_000 = 12_750_000_000
    #             cpu = 3e9 * 4 * 8 * 1.5 = 144_000_000_000
    assert zero2_model_states(P3, 8, 1, cpu_offload=False) == (144_000_000_000, 12_750_000_000)
    # offload:    gpu = 2*3e9 = 6_000_000_000; cpu = 3e9 * max(4*8, 16) * 1.5 = 3e9 * 48 = 144_000_000_000
    assert zero2_model_states(P3, 8, 1, cpu_offload=True) == (144_000_000_000, 6_000_000_000)


def test_3b_zero3_one_node_all_variants() -> None:
    # 4L = 4 * 102_400_000 = 409_600_000
    # no offload, zero_init: gpu = 409_600_000 + int(18*3e9/8) = 409_600_000 + 6_750_000_000 = 7_159_600_000
    #                        cpu = 102_400_000 * 4 * 8 * 1.5 = 4_915_200_000
    assert zero3_model_states(P3, L3, 8, 1, False, False, True) == (4_915_200_000, 7_159_600_000, 409_600_000)
    # no offload, no zero_init: cpu = 3e9 * 4 * 8 * 1.5 = 144_000_000_000
    assert zero3_model_states(P3, L3, 8, 1, False, False, False) == (144_000_000_000, 7_159_600_000, 409_600_000)
    # offload optimizer: gpu = 409_600_000 + int(2*3e9/8) = 409_600_000 + 750_000_000 = 1_159_600_000
    #   zero_init:    cpu = 3e9 * 16 * (1/1) * 1.5 = 72_000_000_000
    #   no zero_init: cpu = 3e9 * max(4*8, 16*1) * 1.5 = 3e9 * 32 * 1.5 = 144_000_000_000
    assert zero3_model_states(P3, L3, 8, 1, True, False, True) == (72_000_000_000, 1_159_600_000, 409_600_000)
    assert zero3_model_states(P3, L3, 8, 1, True, False, False) == (144_000_000_000, 1_159_600_000, 409_600_000)
    # offload optimizer + params: gpu = 4L = 409_600_000
    #   zero_init:    cpu = 3e9 * 18 * 1 * 1.5 = 81_000_000_000
    #   no zero_init: cpu = 3e9 * max(32, 18) * 1.5 = 144_000_000_000
    assert zero3_model_states(P3, L3, 8, 1, True, True, True) == (81_000_000_000, 409_600_000, 409_600_000)
    assert zero3_model_states(P3, L3, 8, 1, True, True, False) == (144_000_000_000, 409_600_000, 409_600_000)


def test_3b_ddp_and_zero1() -> None:
    # DDP: gpu = 16 * 3e9 = 48_000_000_000 (2 fp16 weights + 2 fp16 grads + 12 fp32 Adam state)
    #      cpu = 3e9 * 4 * 8 * 1.5 = 144_000_000_000
    assert ddp_model_states(P3, 8) == (144_000_000_000, 48_000_000_000)
    # ZeRO-1: gpu = 4*3e9 + int(16*3e9/8) = 12_000_000_000 + 6_000_000_000 = 18_000_000_000
    assert zero1_model_states(P3, 8, 1) == (144_000_000_000, 18_000_000_000)


# --- 7B: one node, then two ---------------------------------------------------------------------


def test_7b_zero2_and_zero3_one_node() -> None:
    # ZeRO-2: gpu = 2*7e9 + int(18*7e9/8) = 14_000_000_000 + 15_750_000_000 = 29_750_000_000
    #         cpu = 7e9 * 4 * 8 * 1.5 = 336_000_000_000
    assert zero2_model_states(P7, 8, 1, cpu_offload=False) == (336_000_000_000, 29_750_000_000)
    # ZeRO-3, no offload, zero_init: 4L = 524_288_000
    #   gpu = 524_288_000 + int(18*7e9/8) = 524_288_000 + 15_750_000_000 = 16_274_288_000
    #   cpu = 131_072_000 * 4 * 8 * 1.5 = 6_291_456_000
    assert zero3_model_states(P7, L7, 8, 1, False, False, True) == (6_291_456_000, 16_274_288_000, 524_288_000)


def test_7b_two_nodes_offload_and_zero_init() -> None:
    # 2 nodes x 8 GPUs: total_gpus = 16, gpus_factor = 1/2
    # ZeRO-3 offload optimizer+params, zero_init: cpu = 7e9 * 18 * 0.5 * 1.5 = 94_500_000_000; gpu = 4L
    assert zero3_model_states(P7, L7, 8, 2, True, True, True) == (94_500_000_000, 524_288_000, 524_288_000)
    # ... without zero_init: cpu = 7e9 * max(4*8, 18*0.5) * 1.5 = 7e9 * 32 * 1.5 = 336_000_000_000
    assert zero3_model_states(P7, L7, 8, 2, True, True, False) == (336_000_000_000, 524_288_000, 524_288_000)
    # ZeRO-3 offload optimizer, zero_init: gpu = 524_288_000 + int(2*7e9/16) = 524_288_000 + 875_000_000
    #   = 1_399_288_000; cpu = 7e9 * 16 * 0.5 * 1.5 = 84_000_000_000
    assert zero3_model_states(P7, L7, 8, 2, True, False, True) == (84_000_000_000, 1_399_288_000, 524_288_000)
    # ZeRO-2 offload: cpu = 7e9 * max(4*16, 16) * 1.5 = 7e9 * 96 = 672_000_000_000 (DeepSpeed scales the
    # host figure with the *total* GPU count); gpu = 2*7e9 = 14_000_000_000
    assert zero2_model_states(P7, 8, 2, cpu_offload=True) == (672_000_000_000, 14_000_000_000)


def test_buffer_factor_scales_host_figures_only() -> None:
    # abf 1.0: ZeRO-2 no offload cpu = 7e9 * 4 * 8 * 1.0 = 224_000_000_000; gpu unchanged 29_750_000_000
    assert zero2_model_states(P7, 8, 1, cpu_offload=False, additional_buffer_factor=1.0) == (
        224_000_000_000, 29_750_000_000)
    # abf 2.0: ZeRO-3 offload all, zero_init, 1 node: cpu = 7e9 * 18 * 1 * 2.0 = 252_000_000_000; gpu = 4L
    assert zero3_model_states(P7, L7, 8, 1, True, True, True, additional_buffer_factor=2.0) == (
        252_000_000_000, 524_288_000, 524_288_000)


# --- 176B across 16 nodes x 8 GPUs (128 GPUs) ---------------------------------------------------


def test_176b_zero3_across_sixteen_nodes() -> None:
    # 4L = 4 * 3_596_615_680 = 14_386_462_720; total_gpus = 128; gpus_factor = 1/16
    # no offload: gpu = 14_386_462_720 + int(18*176e9/128) = 14_386_462_720 + 24_750_000_000 = 39_136_462_720
    #   zero_init:    cpu = 3_596_615_680 * 4 * 8 * 1.5 = 3_596_615_680 * 48 = 172_637_552_640
    #   no zero_init: cpu = 176e9 * 4 * 8 * 1.5 = 8_448_000_000_000
    assert zero3_model_states(P176, L176, 8, 16, False, False, True) == (
        172_637_552_640, 39_136_462_720, 14_386_462_720)
    assert zero3_model_states(P176, L176, 8, 16, False, False, False) == (
        8_448_000_000_000, 39_136_462_720, 14_386_462_720)
    # offload optimizer: gpu = 14_386_462_720 + int(2*176e9/128) = 14_386_462_720 + 2_750_000_000 = 17_136_462_720
    #   zero_init:    cpu = 176e9 * 16 / 16 * 1.5 = 264_000_000_000
    #   no zero_init: cpu = 176e9 * max(32, 1) * 1.5 = 8_448_000_000_000
    assert zero3_model_states(P176, L176, 8, 16, True, False, True) == (
        264_000_000_000, 17_136_462_720, 14_386_462_720)
    assert zero3_model_states(P176, L176, 8, 16, True, False, False) == (
        8_448_000_000_000, 17_136_462_720, 14_386_462_720)
    # offload all, zero_init: cpu = 176e9 * 18 / 16 * 1.5 = 297_000_000_000; gpu = 4L
    assert zero3_model_states(P176, L176, 8, 16, True, True, True) == (
        297_000_000_000, 14_386_462_720, 14_386_462_720)


def test_176b_zero2_across_sixteen_nodes() -> None:
    # no offload: gpu = 2*176e9 + int(18*176e9/128) = 352_000_000_000 + 24_750_000_000 = 376_750_000_000
    #             cpu = 176e9 * 4 * 8 * 1.5 = 8_448_000_000_000
    assert zero2_model_states(P176, 8, 16, cpu_offload=False) == (8_448_000_000_000, 376_750_000_000)


def test_176b_megatron() -> None:
    # TP 8 x PP 2 x DP 8 (128 GPUs): p = 176e9 / 16 = 11_000_000_000 per GPU
    #   gpu = 4p + int(16p/8) = 44_000_000_000 + 22_000_000_000 = 66_000_000_000 (Megatron's 4 + 16/d)
    #   cpu = p * 4 * 8 * 1.5 = 11e9 * 48 = 528_000_000_000
    assert megatron_model_states(P176, 8, 2, 8, 8) == (528_000_000_000, 66_000_000_000)
    # TP 8 x PP 16 x DP 1: p = 176e9 / 128 = 1_375_000_000; gpu = 4p + 16p = 20p = 27_500_000_000
    assert megatron_model_states(P176, 8, 16, 1, 8) == (66_000_000_000, 27_500_000_000)
    # uneven split rounds the per-GPU share up: 176e9 / 56 = 3_142_857_142.86 -> 3_142_857_143; 20p
    assert megatron_model_states(P176, 8, 7, 1, 8)[1] == 62_857_142_860


def test_zero1_equals_zero2_on_one_gpu_and_exceeds_it_when_sharded() -> None:
    # one GPU: ZeRO-1 = 4P + 16P = 20P = ZeRO-2's 2P + 18P = 140_000_000_000 for 7B
    assert zero1_model_states(P7, 1, 1)[1] == 140_000_000_000
    assert zero2_model_states(P7, 1, 1, cpu_offload=False)[1] == 140_000_000_000
    # 8 GPUs: ZeRO-1 = 28e9 + 14e9 = 42_000_000_000 > ZeRO-2 = 29_750_000_000
    assert zero1_model_states(P7, 8, 1)[1] == 42_000_000_000


def test_default_largest_layer_follows_a_gpt3_shape() -> None:
    # 7B: h = round((128 * 7e9 / 12) ** (1/3)) = round(4211.3) = 4211
    #     max(4 * 4211^2, 50257 * 4211) = max(70_930_084, 211_632_227) = 211_632_227
    assert default_largest_layer(P7) == 211_632_227
    # tiny models: never more than the model itself
    assert default_largest_layer(10) == 10


# --- sizes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [
    ("7B", 7_000_000_000), ("7b", 7_000_000_000), (" 7 B ", 7_000_000_000), ("70e9", 70_000_000_000),
    ("350M", 350_000_000), ("1.5T", 1_500_000_000_000), ("1.5B", 1_500_000_000), ("2.5K", 2500),
    ("125000000", 125_000_000), ("1_000_000", 1_000_000), ("7G", 7_000_000_000), ("1e3K", 1_000_000),
])
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text, message", [
    ("0", "is zero"), ("0B", "is zero"), ("-7B", "is negative"), ("-1", "is negative"),
    ("abc", "cannot read"), ("", "cannot read"), ("7X", "cannot read"), ("B", "cannot read"),
    ("inf", "cannot read"), ("nan", "cannot read"), ("1.5", "not a whole number"), ("7B7", "cannot read"),
])
def test_parse_size_rejects(text: str, message: str) -> None:
    with pytest.raises(InputError) as exc:
        parse_size(text, "--model-params")
    line = str(exc.value)
    assert message in line and line.startswith("--model-params: ") and "\n" not in line
