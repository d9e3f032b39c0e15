"""What the user's own command and configs decide, for the ``choices:`` line render and submit print.

clusterkit's settings (precision, ZeRO stage, offload, batch sizes, strategy) are what it writes
into the configs it makes and the flags it adds.  Where the command says otherwise (Megatron's or
transformers' ``--fp16``/``--bf16``, transformers' ``--deepspeed ds.json``) or the job runs a
config of the user's own (a DeepSpeed JSON, an accelerate YAML), that is what runs, and the
line says so, with where it was read.  Pure: the configs come parsed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: setting name -> (value as shown, where it was read: ``command --fp16``, ``config ds.json``)
Given = dict[str, tuple[str, str]]

_FALSE = ("false", "0", "no", "off")


def _flag_value(args: Sequence[str], flag: str) -> tuple[bool, str | None]:
    """(whether ``flag`` is on, its value): a bare store_true flag, ``--flag True`` or ``--flag=x``
    (transformers' booleans take a value; ``False`` turns it off)."""
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:].lower() not in _FALSE, arg[len(flag) + 1:]
        if arg == flag:
            after = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else None
            return after is None or after.lower() not in _FALSE, after
    return False, None


def from_command(args: Sequence[str]) -> Given:
    """Precision and strategy the training command's own flags set (Megatron, transformers)."""
    out: Given = {}
    for precision in ("bf16", "fp16"):
        if _flag_value(args, f"--{precision}")[0]:
            out["precision"] = (precision, f"command --{precision}")
    on, path = _flag_value(args, "--deepspeed")
    if on and path:   # transformers' --deepspeed PATH (DeepSpeed's own bare flag names no file)
        out["strategy"] = ("deepspeed", f"command --deepspeed {path}")
    elif _flag_value(args, "--fsdp")[0]:
        out["strategy"] = ("fsdp", "command --fsdp")
    return out


def _enabled(section: object) -> str | None:
    """A DeepSpeed precision section's ``enabled``: ``"yes"``, ``"auto"`` (transformers fills it), or None."""
    if not isinstance(section, Mapping):
        return None
    value = section.get("enabled", False)
    if value is True:
        return "yes"
    return "auto" if value == "auto" else None


def from_ds_config(cfg: Mapping[str, object], where: str) -> Given:
    """Precision, ZeRO stage, offload and batch sizes a user's DeepSpeed config sets (DeepSpeed's
    own defaults where it says nothing: fp32, stage 0, no offload)."""
    source = f"config {where}"
    precision = "fp32"
    for key, name in (("fp16", "fp16"), ("bf16", "bf16"), ("bfloat16", "bf16")):
        state = _enabled(cfg.get(key))
        if state is not None:
            precision = name if state == "yes" else f"{name} auto"
    zero = cfg.get("zero_optimization")
    zero = zero if isinstance(zero, Mapping) else {}
    stage = zero.get("stage", 0)

    def device(key: str) -> str | None:
        section = zero.get(key)
        value = section.get("device") if isinstance(section, Mapping) else None
        return str(value) if value not in (None, "none") else None

    optimizer, params = device("offload_optimizer"), device("offload_param")
    offload = "optimizer+params" if optimizer and params else "optimizer" if optimizer else "params" if params \
        else "none"
    if "nvme" in (optimizer, params):
        offload += " (nvme)"
    out: Given = {"precision": (precision, source), "zero_stage": (str(stage), source), "offload": (offload, source)}
    for key, name in (("train_micro_batch_size_per_gpu", "micro_batch"), ("gradient_accumulation_steps", "grad_accum")):
        if key in cfg:
            out[name] = (str(cfg[key]), source)
    return out


_ACCELERATE_STRATEGY = {"MULTI_GPU": "ddp", "FSDP": "fsdp", "DEEPSPEED": "deepspeed", "NO": "none",
                        "MEGATRON_LM": "megatron"}


def from_accelerate_config(cfg: Mapping[str, object], where: str) -> Given:
    """Strategy and precision a user's accelerate config sets (accelerate's defaults: no mixed precision)."""
    source = f"config {where}"
    dist = str(cfg.get("distributed_type", "NO"))
    mixed = str(cfg.get("mixed_precision", "no"))
    return {"strategy": (_ACCELERATE_STRATEGY.get(dist, dist.lower()), source),
            "precision": ("fp32" if mixed == "no" else mixed, source)}


def megatron(args: Sequence[str], precision_set: bool, micro: int, global_batch: int, dp: int,
             given_batch: set[str]) -> Given:
    """Megatron's precision (its default is fp32: no ``--bf16``/``--fp16`` and no ``--set precision``)
    and the batch sizes its own flags gave."""
    out = from_command(args)
    out.pop("strategy", None)
    if "precision" not in out and not precision_set:
        out["precision"] = ("fp32", "Megatron's default: no --bf16 or --fp16")
    if "micro" in given_batch:
        out["micro_batch"] = (str(micro), "command --micro-batch-size")
    if "global" in given_batch:
        out["grad_accum"] = (str(global_batch // (micro * dp)), "command --global-batch-size")
    return out
