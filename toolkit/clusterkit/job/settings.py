"""Job settings given with ``--set key=value``: batch sizes, ZeRO stage, parallel sizes, overrides.

Values are typed by the setting they target: a string setting (``time``, ``account``,
``partition``) takes the text as given (``time=90`` is ninety minutes, ``account=1234`` an
account), numbers and booleans are parsed by the field.  Unknown keys are errors that list the
valid ones, like site configs.  A setting the chosen launcher or site would ignore is refused
(see :data:`USED_BY`): nothing given on the command line is silently dropped.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from clusterkit.config.jobs import GpuBind, MaxRestarts
from clusterkit.errors import FieldProblem, InputError
from clusterkit.vocab import LAUNCHERS, check_slurm_time


class Settings(BaseModel):
    """Everything a job can tune beyond site, stage, launcher and node count."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # batch math (deepspeed, megatron; torchrun, accelerate, srun pass micro_batch to the script)
    micro_batch: int = Field(1, ge=1, description="micro batch size per GPU (deepspeed, megatron: in their "
                             "config; torchrun, accelerate, srun: $CK_MICRO_BATCH for the training script)")
    grad_accum: int = Field(1, ge=1, description="gradient accumulation steps")
    global_batch: int | None = Field(None, ge=1, description="train batch size; checked against micro*accum*dp")
    precision: Literal["bf16", "fp16", "fp32"] = "bf16"
    # DeepSpeed
    zero_stage: int = Field(2, ge=0, le=3, description="ZeRO stage for deepspeed (0-3)")
    offload: Literal["none", "optimizer", "optimizer+params"] = "none"
    ds_launcher: Literal["no_ssh", "pdsh"] = Field(
        "no_ssh", description="no_ssh: deepspeed on every node via srun (no SSH between nodes); pdsh: once, over SSH")
    ds_args: Literal["deepspeed", "hf", "none"] = Field(
        "deepspeed", description="how the script learns the generated DeepSpeed config: deepspeed: --deepspeed_config "
        "PATH; hf: --deepspeed PATH (transformers); none: only $CK_DS_CONFIG. A command naming its own config wins")
    include: str | None = Field(None, description="deepspeed --include, e.g. 'node1@node2:0,1'")
    exclude_slots: str | None = Field(None, description="deepspeed --exclude, e.g. 'node3:7'")
    # accelerate (its config); torchrun passes it to the script as CK_STRATEGY
    strategy: Literal["ddp", "fsdp"] = Field("ddp", description="ddp or fsdp: accelerate's config; torchrun: "
                                             "$CK_STRATEGY for the training script")
    # Megatron
    tp: int = Field(1, ge=1, description="tensor model parallel size")
    pp: int = Field(1, ge=1, description="pipeline model parallel size")
    cp: int = Field(1, ge=1, description="context parallel size")
    # scheduler overrides
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    max_restarts: MaxRestarts = None
    cpus_per_task: int | None = Field(None, ge=1)
    gpu_type: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$", description="Slurm's GRES "
                                 "type of the GPUs to ask for (e.g. h100): #SBATCH --gpus-per-node=TYPE:N")
    gpu_bind: GpuBind = Field(
        None, description="--launcher srun: task gives each task its own GPU (its CUDA_VISIBLE_DEVICES, for a "
        "script that uses cuda:0); none: every task sees the node's GPUs (cuda:LOCAL_RANK). Default: the site's "
        "nodes.gpu_bind, else none")
    node_setup_in: Literal["host", "container"] = Field(
        "host", description="where the --node-setup steps run: on the host, or in the site's container image "
        "(its runtime's flags, mounts and environment, as the launcher's)")
    container: bool | None = Field(None, description="use the site's container (default: yes if the site has one)")
    preflight_in_job: bool | Literal["perf"] | None = Field(
        None, description="run preflight checks on the allocated nodes first: true, false, or perf (preflight --perf)")
    spares: int | None = Field(None, ge=0, le=1000, description="extra nodes allocated; the job launches on the "
                               "best --nodes of them after its in-job preflight")
    max_relaunches: int | None = Field(None, ge=0, le=100, description="relaunches inside the allocation after "
                                       "a node's failure (multi-node jobs in srun steps; default 3), apart from "
                                       "the requeues of max_restarts")
    # watching the run (the site's watch: keys; None: the site's value)
    stall_floor_s: float | None = Field(None, ge=0, le=86400, description="no progress for this long (at least) "
                                        "is a stall (site default 300); 0: not watched")
    stall_factor: float | None = Field(None, ge=1, le=1000, description="... or for this many median step times")
    warmup_steps: int | None = Field(None, ge=0, le=1_000_000, description="steps of each attempt not judged")
    save_limit_s: float | None = Field(None, gt=0, le=86400, description="how long a save marked as one may take")
    straggler_ratio: float | None = Field(None, ge=0, le=100, description="a rank slower than this many times "
                                          "the others' median step (work) time is a straggler in status (site "
                                          "default 1.5); 0: not judged")
    straggler_replace: bool | None = Field(None, description="replace a straggler that stays one at the next "
                                           "checkpoint save (its node dropped, a spare taken; site default false)")
    recheck_after_hang: bool | None = Field(None, description="after a stall that names no node, run the "
                                            "pairwise performance check (preflight --perf) on the allocation and drop "
                                            "the one node below par (site default true)")
    # the code snapshot's limits (the site's code: keys; None: the site's value)
    code_max_files: int | None = Field(None, ge=1, le=10_000_000, description="most files the code snapshot "
                                       "may hold (site code.max_files, default 20000)")
    code_max_mb: int | None = Field(None, ge=1, le=1_000_000, description="most MiB the code snapshot may hold "
                                    "(site code.max_mb, default 512)")
    # long runs (docs/architecture.md: chains, run names, stop signal)
    stop_signal: Literal["TERM", "USR1", "USR2", "INT"] = Field(
        "TERM", description="the signal the ranks get on the time-limit warning, a preemption Slurm announces, "
        "and cancel (USR1 for PyTorch Lightning's SLURMEnvironment)")
    requeue_by: Literal["clusterkit", "framework"] = Field(
        "clusterkit", description="who calls scontrol requeue after the time-limit warning: clusterkit, or the "
        "training framework on the stop signal (clusterkit then only delivers it and keeps the restart budget)")
    # the checkpoints' room, checked by the in-job preflight (clusterkit plan --render sets them)
    model_params: int | None = Field(None, ge=1, le=10**15, description="the model's parameters (7B, 70e9): the "
                                     "in-job preflight checks that keep_checkpoints of its checkpoints fit the "
                                     "checkpoint directory (14 bytes a parameter)")
    keep_checkpoints: int = Field(2, ge=1, le=1000, description="checkpoints kept at once (with model_params)")
    # nodes that keep failing (the site's node_history: keys; docs/architecture.md §3, Node history)
    node_history: bool = Field(True, description="keep out the nodes the user's node history of the site says keep "
                               "failing (false: let them into this job)")

    @field_validator("preflight_in_job", mode="before")
    @classmethod
    def _in_job(cls, v: Any) -> Any:
        return in_job_value(v)

    @field_validator("model_params", mode="before")
    @classmethod
    def _params(cls, v: Any) -> Any:
        return param_count(v)

    @field_validator("straggler_ratio")
    @classmethod
    def _ratio(cls, v: float | None) -> float | None:
        if v is not None and 0 < v <= 1:
            raise ValueError("must be 0 (off) or more than 1")
        return v

    @field_validator("time")
    @classmethod
    def _time(cls, v: str | None) -> str | None:
        return None if v is None else check_slurm_time(v)


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")
_COUNT = re.compile(r"([0-9]{1,16}(?:\.[0-9]{1,16})?(?:[eE][0-9]{1,2})?)([KMBGT]?)")
_SCALE = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}


def param_count(v: Any) -> Any:
    """A parameter count as written (``7B``, ``70e9``, ``350M``; decimal, as ``clusterkit plan``
    reads them) as a whole number; anything else is left for the field to refuse."""
    if not isinstance(v, str):
        return v
    m = _COUNT.fullmatch(v.strip().upper().replace("_", ""))
    if not m:
        raise ValueError("not a parameter count (examples: 7B, 70e9, 350M, 1.5T)")
    value = Decimal(m.group(1)) * _SCALE[m.group(2)]
    if value != value.to_integral_value():
        raise ValueError("not a whole number of parameters")
    return int(value)


def room_settings(given: Mapping[str, Any], site_in_job: Any, slurm: bool, params: int, keep: int) -> dict[str, Any]:
    """``plan --render``: the settings that have the job's own preflight check the checkpoint
    directory's room for the model (``model_params``, ``keep_checkpoints``), where it runs its
    base checks (a Slurm site, ``preflight_in_job`` true) and the user did not set them."""
    try:
        in_job = in_job_value(given.get("preflight_in_job", site_in_job))
    except ValueError:   # refused with the other settings
        return {}
    if not slurm or in_job is not True or "model_params" in given:
        return {}
    return {"model_params": params, "keep_checkpoints": keep}


def in_job_value(v: Any) -> Any:
    """The in-job preflight's setting as typed: true, false or perf (one message for anything else)."""
    if isinstance(v, str):
        word = v.strip().lower()
        if word == "perf":
            return "perf"
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise ValueError("choose true, false or perf")
    if v is None or isinstance(v, bool):
        return v
    raise ValueError("choose true, false or perf")


# Which launchers act on each setting (through job.sbatch, a launcher file, the launcher's
# argv/env, or the training script's: torchrun passes strategy and micro_batch to the script as
# CK_STRATEGY / CK_MICRO_BATCH, accelerate and srun pass micro_batch so; horovod and colossalai
# start their workers themselves, so their scripts choose the batch).
# A key given for any other launcher is refused, naming these; a key not listed is used by all.
USED_BY: dict[str, tuple[str, ...]] = {
    "micro_batch": ("deepspeed", "megatron", "torchrun", "accelerate", "srun"),
    "grad_accum": ("deepspeed", "megatron"),
    "global_batch": ("deepspeed", "megatron"),
    "precision": ("deepspeed", "accelerate", "megatron"),
    "zero_stage": ("deepspeed",),
    "offload": ("deepspeed", "accelerate"),
    "ds_launcher": ("deepspeed",),
    "ds_args": ("deepspeed",),
    "include": ("deepspeed",),
    "exclude_slots": ("deepspeed",),
    "strategy": ("accelerate", "torchrun"),
    "tp": ("megatron",),
    "pp": ("megatron",),
    "cp": ("megatron",),
    # a stop signal other than TERM goes to every process of the job step; torchrun, accelerate and
    # deepspeed would die of it: only srun's tasks (every rank a Slurm task) can take it
    "stop_signal": ("srun",),
    # the one launcher whose every rank is a Slurm task of its own (the others start the ranks themselves)
    "gpu_bind": ("srun",),
    # the framework requeues from a rank: the ranks run in Slurm job steps (not over SSH)
    "requeue_by": ("torchrun", "deepspeed", "accelerate", "megatron", "srun"),
}
# The settings a launcher passes to the training script instead of acting on them, and the
# variable the script reads (job/launchers: ``for_script``).
TO_SCRIPT: dict[str, tuple[str, tuple[str, ...]]] = {
    "strategy": ("CK_STRATEGY", ("torchrun",)),
    "micro_batch": ("CK_MICRO_BATCH", ("torchrun", "accelerate", "srun")),
}


def script_variable(key: str, launcher: str) -> str | None:
    """The variable through which ``launcher`` hands setting ``key`` to the training script, if it does."""
    variable, launchers = TO_SCRIPT.get(key, ("", ()))
    return variable if launcher in launchers else None


# Settings that only a Slurm site acts on (a local site has no sbatch, partition or requeue).
SLURM_ONLY = ("partition", "account", "qos", "max_restarts", "preflight_in_job", "stop_signal", "requeue_by", "spares",
              "gpu_type", "gpu_bind", "node_setup_in", "max_relaunches", "stall_floor_s", "stall_factor",
              "warmup_steps", "save_limit_s", "model_params", "keep_checkpoints", "straggler_replace",
              "recheck_after_hang")


def gpus_per_node(s: Settings, gpn: int) -> str:
    """``#SBATCH --gpus-per-node``'s value: ``N``, or ``TYPE:N`` with ``gpu_type`` (the one form
    clusterkit writes a GPU request in; ``--sbatch gres=gpu:...`` beside it is refused)."""
    return f"{s.gpu_type}:{gpn}" if s.gpu_type else str(gpn)


def valid_keys() -> list[str]:
    return sorted(Settings.model_fields)


def used_by(key: str) -> tuple[str, ...]:
    """The built-in launchers that act on setting ``key``."""
    return USED_BY.get(key, LAUNCHERS)


def acts_on(key: str, launcher: str) -> bool:
    """Whether ``launcher`` acts on setting ``key``; a site's own launcher (not built in) on those
    every launcher uses (the job's, not a launcher's: time, restarts, container, ...)."""
    return launcher in used_by(key) or (key not in USED_BY and launcher not in LAUNCHERS)


def _typed(raw: str) -> Any:
    """The --set text, left for the target field to type: pydantic's lax mode turns ``"3"`` into
    3 and ``"yes"`` into True for int and bool settings, while a string setting keeps ``"90"``
    as written (guessing the type from the text would make it an int and refuse it)."""
    return raw if raw else None


def unknown_setting(key: str) -> str:
    """Why ``key`` is refused: the closest valid setting first when there is one (``zero_stag``)."""
    close = difflib.get_close_matches(key, valid_keys(), n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    return f"unknown setting; {hint}valid settings: {', '.join(valid_keys())}"


def parse_pairs(pairs: Iterable[str]) -> dict[str, Any]:
    """``['zero_stage=3', 'precision=fp16']`` -> ``{'zero_stage': 3, 'precision': 'fp16'}``."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise InputError(f"--set {pair!r}: expected key=value")
        if key not in Settings.model_fields:
            raise InputError(unknown_setting(key), field=f"settings.{key}")
        if any(ord(c) < 32 or ord(c) == 127 for c in raw):
            raise InputError("control characters (newline, tab) are not allowed in values", field=f"settings.{key}")
        out[key] = _typed(raw.strip())
    return out


def build(values: Mapping[str, Any]) -> Settings:
    """Validate settings; every problem is reported at its field, ``settings.<key>`` (the CLI
    says ``--set key=value: message``)."""
    unknown = [k for k in values if k not in Settings.model_fields]
    if unknown:
        raise InputError.about([FieldProblem(f"settings.{k}", unknown_setting(k)) for k in unknown])
    try:
        return Settings.model_validate(dict(values))
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(FieldProblem(f"settings.{key}" if key else "settings", msg,
                                         repr(values.get(key)) if key else None))
        raise InputError.about(problems) from None
