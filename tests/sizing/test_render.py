"""``clusterkit plan --render``: the recommended setup goes through the real render path.

The run directory is checked for what the plan chose: launcher, stage, nodes, and the settings
that select the setup (strategy, ZeRO stage and offload in ds_config.json, Megatron TP x PP).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import CLI

from .conftest import H100_SITE, H100_TWO_NODES

SiteFile = Callable[[str], str]


def test_render_7b_fsdp(site_file: SiteFile, ck: CLI, tmp_path: Path) -> None:
    out = tmp_path / "run7b"
    code, stdout, err = ck("plan", "--site", site_file(H100_SITE), "--model-params", "7B", "--render",
                           "--out", str(out), "--", "python", "train.py", "--lr", "3e-4")
    assert code == 0, err
    plan = json.loads((out / "plan.json").read_text())
    assert (plan["launcher"], plan["stage"], plan["nnodes"], plan["gpus_per_node"]) == (
        "torchrun", "single-node", 1, 8)
    # torchrun hands the strategy to the script (CK_STRATEGY), which builds FSDP
    assert plan["settings"]["strategy"] == "fsdp" and "recommended: FSDP full shard" in stdout
    assert "export CK_STRATEGY=fsdp\n" in (out / "job.sbatch").read_text()
    assert "train.py --lr 3e-4" in (out / "job.sbatch").read_text()
    assert f"run directory: {out}" in stdout and "recommended: FSDP full shard" in stdout


def test_render_13b_zero2_with_user_settings(site_file: SiteFile, ck: CLI, tmp_path: Path) -> None:
    out = tmp_path / "run13b"
    code, stdout, err = ck("plan", "--json", "--site", site_file(H100_SITE), "--model-params", "13B",
                           "--launcher", "deepspeed", "--render", "--out", str(out),
                           "--set", "micro_batch=2", "--", "python", "train.py")
    assert code == 0, err
    doc = json.loads(stdout)
    # 13B, 1 node x 8: ZeRO-2 = 2*13e9 + int(18*13e9/8) = 26e9 + 29.25e9 = 55_250_000_000 <= 68_719_476_736
    assert (doc["recommended"]["key"], doc["recommended"]["gpu_bytes"]) == ("zero2", 55_250_000_000)
    assert doc["rendered"]["run_dir"] == str(out) and doc["rendered"]["launcher"] == "deepspeed"
    ds = json.loads((out / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage"] == 2 and "offload_optimizer" not in ds["zero_optimization"]
    assert ds["train_micro_batch_size_per_gpu"] == 2  # the user's --set reaches the render


def test_render_offload_goes_into_ds_config(site_file: SiteFile, ck: CLI, tmp_path: Path) -> None:
    out = tmp_path / "run-offload"
    code, _, err = ck("plan", "--site", site_file(H100_SITE), "--model-params", "7B", "--gpus", "8",
                      "--offload", "optimizer+params", "--launcher", "deepspeed", "--render",
                      "--out", str(out), "--", "python", "train.py")
    assert code == 0, err
    zero = json.loads((out / "ds_config.json").read_text())["zero_optimization"]
    assert zero["stage"] == 3
    assert zero["offload_optimizer"]["device"] == "cpu" and zero["offload_param"]["device"] == "cpu"


def test_render_176b_megatron(site_file: SiteFile, ck: CLI, tmp_path: Path) -> None:
    out = tmp_path / "run176b"
    # 16 nodes read the run directory: tmp_path stands in for the site's shared Lustre
    shared = H100_SITE.replace("cost:", f"  - {{path: {tmp_path}, type: lustre}}\ncost:")
    code, _, err = ck("plan", "--site", site_file(shared), "--model-params", "176B",
                      "--largest-layer-params", "3596615680", "--nodes", "16", "--render", "--out", str(out),
                      "--", "python", "pretrain_gpt.py")
    assert code == 0, err
    plan: dict[str, Any] = json.loads((out / "plan.json").read_text())
    assert (plan["launcher"], plan["stage"], plan["nnodes"], plan["world_size"]) == (
        "megatron", "large-cluster", 16, 128)
    script = (out / "job.sbatch").read_text()
    assert "--tensor-model-parallel-size 8" in script and "--pipeline-model-parallel-size 2" in script
    assert "--use-distributed-optimizer" in script  # the ZeRO-1 the estimate assumed


def test_render_when_nothing_fits_writes_nothing(site_file: SiteFile, ck: CLI, tmp_path: Path) -> None:
    out = tmp_path / "never"
    code, stdout, err = ck("plan", "--site", site_file(H100_TWO_NODES), "--model-params", "176B",
                           "--render", "--out", str(out), "--", "python", "train.py")
    assert code == 2 and stdout == ""
    assert err.startswith("clusterkit: error: nothing to render: ") and err.count("\n") == 1
    assert not out.exists()


def test_render_options_need_each_other(site_file: SiteFile, ck: CLI) -> None:
    site = site_file(H100_SITE)
    code, _, err = ck("plan", "--site", site, "--model-params", "7B", "--render")
    assert code == 2
    assert err == "clusterkit: error: --render needs the training command after --, e.g. -- python train.py\n"
    code, _, err = ck("plan", "--site", site, "--model-params", "7B", "--out", "x", "--", "python", "t.py")
    assert code == 2 and err == "clusterkit: error: --out, command 'python t.py' only make sense with --render\n"
