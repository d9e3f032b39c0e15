"""DeepSpeed: the ``deepspeed`` launcher with a ``host slots=N`` hostfile and a generated ds_config.json.

Default on Slurm (``ds_launcher=no_ssh``): one ``deepspeed --no_ssh --node_rank $SLURM_NODEID`` per
node through srun, all reading the hostfile written from the allocation: no SSH between nodes
and no pdsh.  ``ds_launcher=pdsh``: one ``deepspeed`` on the batch host that reaches the others
over pdsh/SSH; env it must carry goes into ``.deepspeed_env`` (pdsh starts a clean shell).

The batch identity DeepSpeed enforces at start-up is checked here, before the queue wait:
``train_batch_size == train_micro_batch_size_per_gpu * gradient_accumulation_steps * dp``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from clusterkit.errors import PlanError
from clusterkit.launchers import SLOTS, Context, Launch, Mode, Sh, Word, split_python
from clusterkit.settings import Settings

_SPEC = re.compile(r"[A-Za-z0-9._-]+(:\d+(,\d+)*)?")
# DeepSpeed's pdsh runner joins one remote shell line: it leaves arguments that start with '-'
# bare, puts others in single quotes without escaping, and wraps .deepspeed_env values in double
# quotes ($ and ` still expand).  Only words needing no quoting at all are safe there.
_PDSH_SAFE = re.compile(r"[A-Za-z0-9_./=:,@+-]*")


def check_pdsh_safe(value: str, what: str) -> str:
    """Refuse a word DeepSpeed's pdsh runner would hand to a remote shell half-quoted."""
    if not _PDSH_SAFE.fullmatch(value):
        raise PlanError(f"ds_launcher=pdsh: {what} {value!r} has characters outside [A-Za-z0-9_./=:,@+-]; "
                        "DeepSpeed's pdsh runner passes it to a remote shell with only partial quoting "
                        "(use ds_launcher=no_ssh, the default)")
    return value


def check_pdsh_env(env: Iterable[Any]) -> None:
    """``.deepspeed_env`` is read back line by line and exported unquoted on every node."""
    for var in env:
        check_pdsh_safe(str(var.value), f"environment value {var.name}=")


def check_filter(text: str, ctx: Context, what: str) -> str:
    """Validate a deepspeed NODE_SPEC[@NODE_SPEC...] string: 0-based slots below gpus_per_node."""
    for spec in text.split("@"):
        if not _SPEC.fullmatch(spec):
            raise PlanError(f"deepspeed {what} {text!r}: {spec!r} is not HOST or HOST:SLOT[,SLOT...]")
        host, _, slots = spec.partition(":")
        for slot in filter(None, slots.split(",")):
            if int(slot) >= ctx.gpus_per_node:
                raise PlanError(f"deepspeed {what} {text!r}: slot {slot} on {host} is out of range 0-{ctx.gpus_per_node - 1}")
    return text


def batch_sizes(s: Settings, dp: int) -> tuple[int, int, int]:
    """(train_batch_size, micro, accum), checking the identity DeepSpeed asserts at start-up."""
    expected = s.micro_batch * s.grad_accum * dp
    if s.global_batch is not None and s.global_batch != expected:
        raise PlanError(
            f"deepspeed: global_batch {s.global_batch} != micro_batch {s.micro_batch} x grad_accum {s.grad_accum} "
            f"x data parallel {dp} = {expected}; change one of them")
    return expected, s.micro_batch, s.grad_accum


def ds_config(s: Settings, dp: int) -> dict[str, object]:
    if s.offload == "optimizer+params" and s.zero_stage != 3:
        raise PlanError(f"deepspeed: offload=optimizer+params needs zero_stage=3 (got {s.zero_stage})")
    if s.offload != "none" and s.zero_stage == 0:
        raise PlanError("deepspeed: CPU offload needs ZeRO (zero_stage 1, 2 or 3)")
    train, micro, accum = batch_sizes(s, dp)
    zero: dict[str, object] = {"stage": s.zero_stage}
    if s.zero_stage >= 1:
        zero.update({"overlap_comm": True, "contiguous_gradients": True})
    if s.offload in ("optimizer", "optimizer+params"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if s.offload == "optimizer+params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if s.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    cfg: dict[str, object] = {
        "train_batch_size": train,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
        "steps_per_print": 100,
        "wall_clock_breakdown": False,
    }
    if s.precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif s.precision == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
                       "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1}
    return cfg


def build(ctx: Context) -> Launch:
    s = ctx.settings
    py = split_python(ctx.command, "deepspeed")
    if s.include and s.exclude_slots:
        raise PlanError("deepspeed: include and exclude_slots are mutually exclusive")
    words: list[Word] = ["deepspeed"]
    mode: Mode = "per_node"
    if ctx.multi:
        words += ["--hostfile", Sh('"$CK_HOSTFILE"')]
        if s.ds_launcher == "no_ssh" or not ctx.slurm:
            words += ["--no_ssh", "--node_rank", Sh('"$SLURM_NODEID"'), "--master_addr", Sh('"$CK_HEAD"'),
                      "--master_port", Sh('"$CK_PORT"')]
        else:
            if ctx.container:
                raise PlanError("deepspeed ds_launcher=pdsh cannot start inside the site's container; "
                                "use ds_launcher=no_ssh (default) or --set container=false")
            mode = "once"
            words += ["--launcher", "pdsh", "--master_addr", Sh('"$CK_HEAD"'), "--master_port", Sh('"$CK_PORT"')]
    else:
        # --master_port: the default, 29500, collides between two jobs on one node
        words += ["--num_gpus", str(ctx.gpus_per_node), "--master_port", Sh('"$CK_PORT"')]
    if s.include:
        words += ["--include", check_filter(s.include, ctx, "include")]
    if s.exclude_slots:
        words += ["--exclude", check_filter(s.exclude_slots, ctx, "exclude_slots")]
    if not py.is_python:
        words.append("--no_python")
    elif py.module:
        words.append("--module")
    cfg = ds_config(s, ctx.world_size)
    args = tuple(py.args)
    if not any(a.startswith(("--deepspeed_config", "--deepspeed-config")) for a in args):
        args += ("--deepspeed", "--deepspeed_config", f"{ctx.run_dir}/ds_config.json")
    if mode == "once":
        for arg in args:
            check_pdsh_safe(arg, "training argument")
    files = {"ds_config.json": json.dumps(cfg, indent=2) + "\n"}
    notes = (f"train_batch_size {cfg['train_batch_size']} = micro {s.micro_batch} x accum {s.grad_accum} "
             f"x dp {ctx.world_size}", f"ZeRO stage {s.zero_stage}, offload {s.offload}, {s.precision}")
    return Launch("deepspeed", mode, tuple(words), args, dialect=SLOTS if ctx.multi else None,
                  files=files, notes=notes)
