"""Hugging Face Accelerate: ``accelerate launch --config_file accelerate.yaml`` once per node.

The config file holds the job's shape; ``--machine_rank`` is per node (``$SLURM_NODEID``, escaped
so each node expands its own) and ``--main_process_ip/--main_process_port`` point at the head.
"""

from __future__ import annotations

import yaml

from clusterkit.errors import PlanError
from clusterkit.job.launchers import Context, Launch, Sh, Word, for_script, split_python


def _check_offload(ctx: Context) -> None:
    s = ctx.settings
    if "offload" not in s.model_fields_set or s.offload == "none":
        return
    if s.strategy != "fsdp":
        raise PlanError(f"accelerate: offload={s.offload} needs strategy=fsdp (DDP keeps everything on the GPU)")
    if s.offload != "optimizer+params":
        # FSDP's CPUOffload moves parameters, gradients and the optimizer step together
        raise PlanError("accelerate: FSDP offloads parameters and optimizer together (fsdp_offload_params); "
                        "use offload=optimizer+params")


def config(ctx: Context) -> dict[str, object]:
    s = ctx.settings
    _check_offload(ctx)
    if s.strategy == "fsdp":
        dist = "FSDP"
    elif ctx.world_size == 1:
        dist = "NO"
    else:
        dist = "MULTI_GPU"
    cfg: dict[str, object] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": dist,
        "mixed_precision": "no" if s.precision == "fp32" else s.precision,
        "num_machines": ctx.nnodes,
        "num_processes": ctx.world_size,
        "machine_rank": 0,          # replaced per node by --machine_rank
        "rdzv_backend": "static",
        "same_network": True,
        "main_training_function": "main",
        "gpu_ids": "all",
        "use_cpu": False,
    }
    if dist == "FSDP":
        cfg["fsdp_config"] = {
            "fsdp_sharding_strategy": "FULL_SHARD",
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_offload_params": s.offload == "optimizer+params",
            "fsdp_use_orig_params": True,
        }
    return cfg


def build(ctx: Context) -> Launch:
    py = split_python(ctx.command, "accelerate")
    words: list[Word] = ["accelerate", "launch", "--config_file", f"{ctx.run_dir}/accelerate.yaml",
                         "--num_machines", str(ctx.nnodes), "--num_processes", str(ctx.world_size)]
    if ctx.multi:
        words += ["--machine_rank", Sh('"$SLURM_NODEID"'), "--main_process_ip", Sh('"$CK_HEAD"')]
    words += ["--main_process_port", Sh('"$CK_PORT"')]   # the default, 29500, collides between jobs
    if not py.is_python:
        words.append("--no_python")
    elif py.module:
        words.append("--module")
    files = {"accelerate.yaml": yaml.safe_dump(config(ctx), sort_keys=True)}
    return Launch("accelerate", "per_node", tuple(words), py.args, files=files,
                  env=for_script(ctx, "accelerate", "micro_batch"))
