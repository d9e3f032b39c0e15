"""Activations (only with --seq-len): full recomputation + FlashAttention, after Korthikanti et al. 2022.

  first stage: 2*s*b*h*L + 34*s*b*h (+ output layer when pp == 1)
  last stage:  2*s*b*h*ceil(L/pp) + 34*s*b*h + 4*s*b*h + 4*s*b*v
  per GPU:     ceil(max(first, last) / tp)
Expected values are worked by hand below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clusterkit.sizing.model import Shape, activation_bytes, make_shape
from tests.conftest import CLI

from .conftest import H100_SITE, by_key

Json = Callable[..., dict[str, Any]]

# 7B, LLaMA-like: s=4096, b=1, h=4096, L=32, v=32000 -> s*b*h = 16_777_216
#   checkpoints 2 * 16_777_216 * 32 = 1_073_741_824; one layer 34 * 16_777_216 = 570_425_344
#   output 4 * 16_777_216 + 4 * 4096 * 32000 = 67_108_864 + 524_288_000 = 591_396_864
#   total 2_235_564_032
SHAPE_7B = Shape(seq_len=4096, micro_batch=1, hidden=4096, layers=32, vocab=32000)
ACT_7B = 2_235_564_032


def test_activation_bytes_7b() -> None:
    assert activation_bytes(SHAPE_7B) == ACT_7B


def test_activation_bytes_176b_tp8_pp2() -> None:
    # BLOOM-like: s=2048, b=1, h=14336, L=70, v=250880 -> s*b*h = 29_360_128
    #   first = 29_360_128 * (2*70 + 34) = 29_360_128 * 174 = 5_108_662_272
    #   last  = 29_360_128 * (2*35 + 34 + 4) + 4 * 2048 * 250880 = 3_170_893_824 + 2_055_208_960 = 5_226_102_784
    #   per GPU = 5_226_102_784 / 8 = 653_262_848
    shape = Shape(seq_len=2048, micro_batch=1, hidden=14336, layers=70, vocab=250880)
    assert activation_bytes(shape, tp=8, pp=2) == 653_262_848


def test_make_shape_fills_in_a_gpt3_shape() -> None:
    # h = round((128 * 7e9 / 12) ** (1/3)) = 4211; L = round(7e9 / (12 * 4211^2)) = round(32.9) = 33
    assert make_shape(7_000_000_000, 2048) == Shape(2048, 1, 4211, 33, 50257, ("hidden", "layers", "vocab"))
    # layers given: h = round(sqrt(7e9 / (12 * 32))) = round(4269.6) = 4270
    assert make_shape(7_000_000_000, 2048, 2, layers=32, vocab=32000) == Shape(2048, 2, 4270, 32, 32000, ("hidden",))


def test_cli_counts_activations(site_file: Callable[[str], str], plan_json: Json) -> None:
    doc = plan_json("--site", site_file(H100_SITE), "--model-params", "7B", "--largest-layer-params", "131072000",
                    "--gpus", "8", "--seq-len", "4096", "--hidden-size", "4096", "--layers", "32",
                    "--vocab-size", "32000")
    fsdp = by_key(doc)["fsdp"]
    # model states 16_274_288_000 (test_cli) + activations 2_235_564_032 = 18_509_852_032
    assert (fsdp["gpu_bytes"], fsdp["activation_bytes"], fsdp["gpu_total_bytes"]) == (
        16_274_288_000, ACT_7B, 18_509_852_032)
    assert doc["shape"] == {"seq_len": 4096, "micro_batch": 1, "hidden": 4096, "layers": 32, "vocab": 32000,
                            "assumed": []}


def test_activations_can_push_a_setup_out(site_file: Callable[[str], str], plan_json: Json) -> None:
    # 13B on 8 GPUs, s=4096, b=8, h=5120, L=40, v=32000: s*b*h = 167_772_160
    #   2*167_772_160*40 + 34*167_772_160 + 4*167_772_160 + 4*4096*8*32000
    #   = 13_421_772_800 + 5_704_253_440 + 671_088_640 + 4_194_304_000 = 23_991_418_880
    # ZeRO-2: 26e9 + int(18*13e9/8) = 55_250_000_000 + 23_991_418_880 = 79_241_418_880 > 68_719_476_736
    # ZeRO-3: 4*163_840_000 + 29_250_000_000 = 29_905_360_000 + 23_991_418_880 = 53_896_778_880 (fits)
    doc = plan_json("--site", site_file(H100_SITE), "--model-params", "13B", "--largest-layer-params", "163840000",
                    "--gpus", "8", "--seq-len", "4096", "--micro-batch", "8", "--hidden-size", "5120",
                    "--layers", "40", "--vocab-size", "32000")
    c = by_key(doc)
    assert (c["zero2"]["gpu_total_bytes"], c["zero2"]["fits"]) == (79_241_418_880, False)
    assert c["zero2"]["gpu_bytes"] == 55_250_000_000  # the DeepSpeed figure stays model states only
    rec = doc["recommended"]
    assert (rec["key"], rec["gpu_total_bytes"]) == ("zero3", 53_896_778_880)
    assert "ZeRO-2 does not fit on 1 node x 8 GPUs (8 GPUs): 73.8 GiB (51.5 GiB model states + 22.3 GiB activations)" \
        in doc["reason"]


def test_shape_options_need_seq_len(site_file: Callable[[str], str], ck: CLI) -> None:
    site = site_file(H100_SITE)
    code, out, err = ck("plan", "--site", site, "--model-params", "7B", "--layers", "32")
    assert (code, out, err) == (2, "", "clusterkit: error: --layers only make sense with --seq-len\n")
    code, out, err = ck("plan", "--site", site, "--model-params", "7B", "--seq-len", "0")
    assert (code, out, err) == (2, "", "clusterkit: error: --seq-len 0: must be at least 1\n")
