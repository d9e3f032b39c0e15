"""``clusterkit plan`` end to end: figures and recommendation in ``--json``, the table, bad input.

Sites are written into tmp_path.  The H100 site: 64 nodes x 8 GPUs of 80 GiB, 1024 GiB host per
node.  With the default 20% headroom, model states may use
  per GPU:  80 GiB * 0.8 = 64 GiB = 68_719_476_736 bytes
  per node: 1024 GiB * 0.8 = 819.2 GiB = 879_609_302_220.8 bytes
Expected figures are worked by hand from DeepSpeed's formulas (see test_figures.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import CLI

from .conftest import H100_SITE, H100_TWO_NODES, SMALL_SITE, TINY_SITE, by_key

Json = Callable[..., dict[str, Any]]


def test_3b_recommends_fsdp_on_one_node(site_file: Callable[[str], str], plan_json: Json) -> None:
    doc = plan_json("--site", site_file(H100_SITE), "--model-params", "3B", "--largest-layer-params", "102.4M")
    assert doc["model_params"] == 3_000_000_000 and doc["largest_layer_params"] == 102_400_000
    assert doc["largest_layer_assumed"] is False
    assert doc["usable_gpu_bytes"] == 68_719_476_736
    c = by_key(doc)
    # FSDP ~ ZeRO-3 no offload, zero_init, 1 node x 8: gpu = 4*102.4e6 + int(18*3e9/8) = 7_159_600_000
    #   host = 102.4e6 * 4 * 8 * 1.5 = 4_915_200_000
    assert (c["fsdp"]["gpu_bytes"], c["fsdp"]["host_bytes"]) == (7_159_600_000, 4_915_200_000)
    assert (c["zero3"]["gpu_bytes"], c["zero3"]["host_bytes"]) == (7_159_600_000, 4_915_200_000)
    # DDP: 16 * 3e9 = 48_000_000_000 per GPU, fits in 68.7e9; host 3e9 * 4 * 8 * 1.5 = 144e9
    assert (c["ddp"]["gpu_bytes"], c["ddp"]["host_bytes"], c["ddp"]["fits"]) == (48_000_000_000, 144_000_000_000, True)
    # ZeRO-2 offload: gpu = 2 * 3e9; host = 3e9 * max(32, 16) * 1.5 = 144e9
    assert (c["zero2-offload"]["gpu_bytes"], c["zero2-offload"]["host_bytes"]) == (6_000_000_000, 144_000_000_000)
    rec = doc["recommended"]
    # rule of thumb 1B-10B: FSDP or ZeRO-3; FSDP first under the default (torchrun) launcher
    assert (rec["key"], rec["launcher"], rec["nodes"], rec["gpus"], rec["stage"]) == (
        "fsdp", "torchrun", 1, 8, "single-node")
    assert rec["settings"] == {"strategy": "fsdp"}
    assert "1B-10B" in doc["reason"] and doc["needed"] is None


def test_3b_under_deepspeed_recommends_zero3(site_file: Callable[[str], str], plan_json: Json) -> None:
    doc = plan_json("--site", site_file(H100_SITE), "--model-params", "3e9", "--largest-layer-params", "102400000",
                    "--launcher", "deepspeed")
    assert {c["key"] for c in doc["candidates"]} == {
        "zero1", "zero2", "zero3", "zero2-offload", "zero3-offload-opt", "zero3-offload-all"}
    rec = doc["recommended"]
    assert (rec["key"], rec["launcher"], rec["settings"], rec["gpu_bytes"]) == (
        "zero3", "deepspeed", {"zero_stage": 3, "offload": "none"}, 7_159_600_000)


def test_7b_on_eight_gpus(site_file: Callable[[str], str], plan_json: Json) -> None:
    doc = plan_json("--site", site_file(H100_SITE), "--model-params", "7B", "--largest-layer-params", "131072000",
                    "--gpus", "8")
    c = by_key(doc)
    # DDP: 16 * 7e9 = 112_000_000_000 > 68_719_476_736: does not fit the GPU
    assert (c["ddp"]["gpu_bytes"], c["ddp"]["fits_gpu"], c["ddp"]["fits"]) == (112_000_000_000, False, False)
    # ZeRO-1: 4*7e9 + int(16*7e9/8) = 28e9 + 14e9 = 42_000_000_000
    assert c["zero1"]["gpu_bytes"] == 42_000_000_000
    # ZeRO-2: 2*7e9 + int(18*7e9/8) = 29_750_000_000; host 7e9 * 4 * 8 * 1.5 = 336_000_000_000
    assert (c["zero2"]["gpu_bytes"], c["zero2"]["host_bytes"]) == (29_750_000_000, 336_000_000_000)
    # ZeRO-3: 4*131_072_000 + int(18*7e9/8) = 524_288_000 + 15_750_000_000 = 16_274_288_000
    #   host (zero_init) = 131_072_000 * 4 * 8 * 1.5 = 6_291_456_000
    assert (c["zero3"]["gpu_bytes"], c["zero3"]["host_bytes"]) == (16_274_288_000, 6_291_456_000)
    # ZeRO-3 offload optimizer: 524_288_000 + int(2*7e9/8) = 2_274_288_000; host 7e9 * 16 * 1 * 1.5 = 168e9
    assert (c["zero3-offload-opt"]["gpu_bytes"], c["zero3-offload-opt"]["host_bytes"]) == (
        2_274_288_000, 168_000_000_000)
    # ZeRO-3 offload optimizer+params: 4L = 524_288_000; host 7e9 * 18 * 1.5 = 189_000_000_000
    assert (c["zero3-offload-all"]["gpu_bytes"], c["zero3-offload-all"]["host_bytes"]) == (
        524_288_000, 189_000_000_000)
    assert doc["recommended"]["key"] == "fsdp" and doc["recommended"]["gpu_bytes"] == 16_274_288_000


def test_7b_without_zero_init(site_file: Callable[[str], str], plan_json: Json) -> None:
    doc = plan_json("--site", site_file(H100_SITE), "--model-params", "7B", "--largest-layer-params", "131072000",
                    "--gpus", "8", "--no-zero-init")
    c = by_key(doc)
    # ZeRO-3 no offload, no zero_init: host = 7e9 * 4 * 8 * 1.5 = 336_000_000_000
    assert c["zero3"]["host_bytes"] == 336_000_000_000
    # offload all, no zero_init: host = 7e9 * max(4*8, 18*1) * 1.5 = 336_000_000_000
    assert c["zero3-offload-all"]["host_bytes"] == 336_000_000_000


def test_7b_offload_filter_and_buffer_factor(site_file: Callable[[str], str], plan_json: Json) -> None:
    doc = plan_json("--site", site_file(H100_SITE), "--model-params", "7B", "--largest-layer-params", "131072000",
                    "--gpus", "16", "--offload", "optimizer", "--buffer-factor", "1.0")
    c = by_key(doc)
    assert set(c) == {"zero2-offload", "zero3-offload-opt"}
    # 2 nodes x 8, abf 1.0. ZeRO-2 offload: host = 7e9 * max(4*16, 16) * 1.0 = 448_000_000_000; gpu = 14e9
    assert (c["zero2-offload"]["gpu_bytes"], c["zero2-offload"]["host_bytes"]) == (14_000_000_000, 448_000_000_000)
    # ZeRO-3 offload optimizer: gpu = 524_288_000 + int(2*7e9/16) = 1_399_288_000
    #   host = 7e9 * 16 * 0.5 * 1.0 = 56_000_000_000
    assert (c["zero3-offload-opt"]["gpu_bytes"], c["zero3-offload-opt"]["host_bytes"]) == (
        1_399_288_000, 56_000_000_000)
    # the rule's FSDP/ZeRO-3 are excluded by --offload; the ladder's next offload setup is ZeRO-2 offload
    assert doc["recommended"]["key"] == "zero2-offload" and doc["recommended"]["stage"] == "multi-node"
    assert "not available with --offload optimizer" in doc["reason"]


def test_176b_across_sixteen_nodes(site_file: Callable[[str], str], plan_json: Json) -> None:
    doc = plan_json("--site", site_file(H100_SITE), "--model-params", "176B",
                    "--largest-layer-params", "3596615680", "--nodes", "16", "--hours", "24")
    c = by_key(doc)
    # ZeRO-3: 14_386_462_720 + int(18*176e9/128) = 39_136_462_720; host 3_596_615_680 * 48 = 172_637_552_640
    assert (c["zero3"]["gpu_bytes"], c["zero3"]["host_bytes"], c["zero3"]["fits"]) == (
        39_136_462_720, 172_637_552_640, True)
    # ZeRO-3 offload optimizer: 14_386_462_720 + 2_750_000_000; host 176e9 * 16 / 16 * 1.5 = 264e9
    assert (c["zero3-offload-opt"]["gpu_bytes"], c["zero3-offload-opt"]["host_bytes"]) == (
        17_136_462_720, 264_000_000_000)
    # ZeRO-3 offload all: 4L; host 176e9 * 18 / 16 * 1.5 = 297e9
    assert (c["zero3-offload-all"]["gpu_bytes"], c["zero3-offload-all"]["host_bytes"]) == (
        14_386_462_720, 297_000_000_000)
    # ZeRO-2: 352e9 + 24.75e9 = 376_750_000_000 per GPU: no
    assert (c["zero2"]["gpu_bytes"], c["zero2"]["fits"]) == (376_750_000_000, False)
    # Megatron, TP 8 inside the node: PP 1 needs 4*22e9 + 16*22e9/16 = 110e9 (no); PP 2, DP 8:
    #   p = 176e9/16 = 11e9, gpu = 44e9 + int(16*11e9/8) = 66_000_000_000 <= 68_719_476_736 (yes)
    #   host = 11e9 * 4 * 8 * 1.5 = 528_000_000_000 <= 879_609_302_220 (yes)
    rec = doc["recommended"]
    assert (rec["key"], rec["tp"], rec["pp"], rec["dp"], rec["gpu_bytes"], rec["host_bytes"]) == (
        "megatron", 8, 2, 8, 66_000_000_000, 528_000_000_000)
    assert (rec["nodes"], rec["gpus"], rec["stage"], rec["launcher"]) == (16, 128, "large-cluster", "megatron")
    assert rec["settings"] == {"tp": 8, "pp": 2}
    # cost: 128 GPUs * 24 h = 3072 GPU-hours * 2.5 USD = 7680.00
    assert doc["cost"] == {"hours": 24.0, "gpu_hours": 3072.0, "price_per_gpu_hour": 2.5, "currency": "USD",
                           "total": 7680.0}


def test_176b_picks_the_fewest_nodes(site_file: Callable[[str], str], plan_json: Json) -> None:
    doc = plan_json("--site", site_file(H100_SITE), "--model-params", "176B", "--largest-layer-params", "3.59661568B")
    rec = doc["recommended"]
    # Megatron at n nodes can reach 20 * 176e9 / (8n) bytes per GPU (PP = n, DP 1): <= 68_719_476_736 needs
    # n >= 6.4. At 7 nodes (divisors 1, 7): p = ceil(176e9/56) = 3_142_857_143, 20p = 62_857_142_860
    assert (rec["key"], rec["nodes"], rec["tp"], rec["pp"], rec["dp"], rec["gpu_bytes"]) == (
        "megatron", 7, 8, 7, 1, 62_857_142_860)
    assert rec["stage"] == "multi-node"
    # ZeRO-3 (no offload) needs 14_386_462_720 + 18*176e9/(8n) <= 68_719_476_736: n >= 7.29, so 8 nodes
    assert by_key(doc)["zero3"]["nodes"] == 8


def test_rule_choice_that_does_not_fit_falls_to_the_next(site_file: Callable[[str], str], plan_json: Json) -> None:
    # small site: 8 GiB GPUs -> 6.4 GiB = 6_871_947_673 usable. 500M: DDP = 16 * 5e8 = 8e9 (no);
    # next on the ladder, ZeRO-1: 4*5e8 + int(16*5e8/8) = 3_000_000_000 (yes)
    doc = plan_json("--site", site_file(SMALL_SITE), "--model-params", "500M")
    assert by_key(doc)["ddp"]["fits"] is False
    rec = doc["recommended"]
    assert (rec["key"], rec["gpu_bytes"], rec["nodes"]) == ("zero1", 3_000_000_000, 1)
    assert "under 1B" in doc["reason"] and "DDP does not fit" in doc["reason"]
    assert "next that fits: ZeRO-1" in doc["reason"]


def test_nothing_fits_says_how_many_gpus(site_file: Callable[[str], str], plan_json: Json) -> None:
    doc = plan_json("--site", site_file(H100_TWO_NODES), "--model-params", "176B",
                    "--largest-layer-params", "3596615680")
    assert doc["recommended"] is None and not any(c["fits"] for c in doc["candidates"])
    # fewest GPUs that would fit: ZeRO-3 offload optimizer, host 176e9 * 16 * 1.5 / n <= 879_609_302_220
    # needs n >= 4.8 -> 5 nodes (40 GPUs); gpu = 14_386_462_720 + int(2*176e9/40) = 23_186_462_720.
    # (offload all needs n >= 5.4, Megatron 7, ZeRO-3 8 nodes)
    need = doc["needed"]
    assert (need["key"], need["nodes"], need["gpus"], need["gpu_bytes"]) == (
        "zero3-offload-opt", 5, 40, 23_186_462_720)
    assert "nothing fits" in doc["reason"] and "would need 40 GPUs (5 nodes x 8)" in doc["reason"]


def test_nothing_fits_at_any_size(site_file: Callable[[str], str], plan_json: Json) -> None:
    # 1 GiB GPUs (0.8 GiB usable) and a 1B-parameter layer: ZeRO-3 needs 4 * 1e9 bytes on each GPU
    # whatever the GPU count; the other DeepSpeed setups replicate >= 2 * 3e9 bytes
    doc = plan_json("--site", site_file(TINY_SITE), "--model-params", "3B", "--largest-layer-params", "1B",
                    "--launcher", "deepspeed")
    assert doc["recommended"] is None and doc["needed"] is None
    assert "no GPU count would help" in doc["reason"]


def test_human_table_in_a_pipe(site_file: Callable[[str], str], ck: CLI) -> None:
    code, out, err = ck("plan", "--site", site_file(H100_SITE), "--model-params", "7B", "--hours", "10")
    # where the site's checkpoint storage is on this machine, its free space may be said short
    assert code == 0 and all(ln.startswith("clusterkit: warning: checkpoints: ") for ln in err.splitlines()), err
    lines = out.splitlines()
    assert not any(ch in out for ch in "│─┃━\x1b")  # plain text: no box drawing, no colour codes
    starred = [ln for ln in lines if ln.startswith("*")]
    assert len(starred) == 1 and "FSDP full shard" in starred[0] and "single-node" in starred[0]
    assert "largest layer 212M (assumed)" in out
    assert "recommended: FSDP full shard on 1 node x 8 GPUs (8 GPUs), stage single-node" in out
    # 8 GPUs * 10 h = 80 GPU-hours * 2.5 = 200.00 USD
    assert "cost: 80 GPU-hours for 10 h = 200.00 USD at 2.5 USD/GPU-hour" in out


def test_cost_without_a_price(site_file: Callable[[str], str], plan_json: Json) -> None:
    doc = plan_json("--site", site_file(SMALL_SITE), "--model-params", "500M", "--gpus", "4", "--hours", "1.5")
    # below one node: 1 node x 4 GPUs; 4 * 1.5 = 6 GPU-hours, no price in the site
    assert doc["recommended"]["gpus_per_node"] == 4
    assert doc["cost"] == {"hours": 1.5, "gpu_hours": 6.0, "price_per_gpu_hour": None, "currency": None, "total": None}


@pytest.mark.parametrize("args, message", [
    (["--model-params", "0"], "--model-params: '0' is zero"),
    (["--model-params", "-7B"], "--model-params: '-7B' is negative"),
    (["--model-params", "seven"], "--model-params: cannot read 'seven'"),
    (["--model-params", "7B", "--largest-layer-params", "0"], "--largest-layer-params: '0' is zero"),
    (["--model-params", "7B", "--largest-layer-params", "8B"],
     "--largest-layer-params 8B is larger than --model-params 7B"),
    (["--model-params", "7B", "--gpus", "12"], "--gpus 12 is not a multiple of the site's 8 GPUs per node"),
    (["--model-params", "7B", "--gpus", "0"], "--gpus 0: must be at least 1"),
    (["--model-params", "7B", "--gpus", "eight"], "--gpus: 'eight' is not a whole number"),
    (["--model-params", "7B", "--nodes", "-1"], "--nodes -1: must be at least 1"),
    (["--model-params", "7B", "--nodes", "65"], "65 nodes asked for, but the site has 64"),
    (["--model-params", "7B", "--gpus", "8", "--nodes", "1"], "give --gpus or --nodes, not both"),
    (["--model-params", "7B", "--headroom", "1"], "--headroom 1.0: must be at least 0 and below 1"),
    (["--model-params", "7B", "--hours", "0"], "--hours 0.0: must be positive"),
    (["--model-params", "7B", "--launcher", "megatron", "--offload", "optimizer"],
     "no setup runs under --launcher megatron with --offload optimizer"),
])
def test_bad_input_is_one_line_exit_2(site_file: Callable[[str], str], ck: CLI,
                                      args: list[str], message: str) -> None:
    code, out, err = ck("plan", "--site", site_file(H100_SITE), *args)
    assert code == 2
    assert out == ""
    assert err.startswith(f"clusterkit: error: {message}") and err.count("\n") == 1


def test_unknown_site_is_exit_2(ck: CLI, tmp_path: Any) -> None:
    code, out, err = ck("plan", "--site", str(tmp_path / "nope.yaml"), "--model-params", "7B")
    assert code == 2 and out == "" and err.startswith("clusterkit: error: ") and err.count("\n") == 1
