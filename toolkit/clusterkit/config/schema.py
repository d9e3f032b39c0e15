"""The site config schema: one pydantic model per section, and the rules each key follows.

A site config describes one cluster (docs/architecture.md §5).  The models are frozen and strict;
:mod:`clusterkit.config.load` reads the YAML and turns validation errors into ``file:line``
messages.  Closed vocabularies (stages, launchers, transports, scheduler kinds, Slurm time) come
from :mod:`clusterkit.vocab`.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from clusterkit import hostlist
from clusterkit.config.envrules import (
    ENV_NAME,
    NCCL_ENV_NAMES,
    NCCL_ENV_PREFIXES,
    container_env_problem,
    job_env_problem,
)
from clusterkit.config.history_keys import NodeHistoryKeys
from clusterkit.config.sbatch_options import meanings
from clusterkit.config.watch_keys import WatchKeys
from clusterkit.vocab import Launcher, ProbeTransport, SchedulerKind, Stage, check_slurm_time

#: ``#SBATCH`` options clusterkit writes itself, and where a site or user sets them instead.
OWNED_SBATCH = {
    "job-name": "--job-name", "nodes": "--nodes (or the stage)", "ntasks": "--launcher (it decides the tasks)",
    "ntasks-per-node": "--launcher (it decides the tasks)", "ntasks-per-core": "--launcher (it decides the tasks)",
    "ntasks-per-socket": "--launcher (it decides the tasks)", "ntasks-per-gpu": "--launcher (it decides the tasks)",
    "ntasks-per-tres": "--launcher (it decides the tasks)",
    "tres-per-task": "--set cpus_per_task=N and --gpus-per-node",
    "gpus-per-node": "--gpus-per-node", "gpus": "--gpus-per-node", "gpus-per-task": "--gpus-per-node",
    "gpus-per-socket": "--gpus-per-node", "cpus-per-task": "--set cpus_per_task=N",
    "partition": "scheduler.partition", "account": "scheduler.account", "qos": "scheduler.qos",
    "time": "scheduler.time", "output": "--out (logs go to the run directory)",
    "error": "--out (logs go to the run directory)", "input": "the training command",
    "open-mode": "scheduler.max_restarts (requeued runs append to their log)", "signal": "scheduler.preempt_signal_s",
    "requeue": "scheduler.max_restarts", "no-requeue": "scheduler.max_restarts: 0",
    "chdir": "--out (jobs run in their run directory)", "export": "nccl.env",
    "export-file": "nccl.env", "get-user-env": "nccl.env", "wrap": "the command after '--'",
    "exclude": "--exclude", "parsable": "submit --json (clusterkit reads sbatch's answer itself)",
    "wait": "submit --wait", "test-only": "submit --dry-run", "array": "submit --array or --sweep",
    "dependency": "submit --after JOB or --chain N", "kill-on-invalid-dep": "submit --after JOB (set with it)",
}


def owned_sbatch(key: str) -> str | None:
    """The option of :data:`OWNED_SBATCH` that sbatch option ``key`` sets, if any, by sbatch's own
    option table (:mod:`clusterkit.config.sbatch_options`): an alias (``tasks-per-node`` is
    ``ntasks-per-node``) or an abbreviation, which getopt_long takes (``--out`` is ``--output``); a
    prefix several options share is owned when any of them is (sbatch would refuse it anyway)."""
    return (next((name for name in meanings(key) if name in OWNED_SBATCH), None)
            or next((name for name in OWNED_SBATCH if name.startswith(key)), None))


class _Model(BaseModel):
    # strict: `gpus_per_node: true` is not 1; allow_inf_nan: `.inf` GB of memory is not a size
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Scheduler(_Model):
    """How jobs reach the machines: Slurm, or this machine with no scheduler."""

    kind: SchedulerKind = "slurm"
    cluster: str | None = Field(
        None, description="Slurm's ClusterName (scontrol show config): which cluster this site describes")
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str = "01:00:00"
    sbatch: dict[str, str | int | bool] = Field(default_factory=dict)
    max_restarts: int = Field(3, ge=0, le=100)
    preempt_signal_s: int = Field(120, ge=10, le=3600)
    grace_s: int = Field(60, ge=1, le=3600, validate_default=True,
                         description="seconds the ranks get to save after SIGTERM (time-limit warning, cancel)")
    max_array_size: int | None = Field(
        None, ge=1, le=4_000_001,
        description="Slurm's MaxArraySize (scontrol show config): array indices must stay below it; "
                    "unset: submit asks Slurm")

    @field_validator("grace_s")
    @classmethod
    def _grace(cls, v: int, info: ValidationInfo) -> int:
        signal_s = info.data.get("preempt_signal_s")
        # the ranks save after the USR2 warning and the job requeues itself before the limit
        if isinstance(signal_s, int) and v >= signal_s:
            raise ValueError(f"grace_s {v} must be less than preempt_signal_s {signal_s}: the ranks save "
                             "between the time-limit warning and the requeue, before the limit")
        return v

    @field_validator("time")
    @classmethod
    def _time(cls, v: str) -> str:
        return check_slurm_time(v)

    @field_validator("sbatch")
    @classmethod
    def _sbatch(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in v:
            if not re.fullmatch(r"[a-z][a-z0-9-]*", key):
                raise ValueError(f"sbatch option {key!r} must be a long option name like 'exclusive' or 'mem'")
            owned = owned_sbatch(key)
            if owned:
                raise ValueError(f"sbatch option {key!r} sets --{owned}, which clusterkit writes itself; "
                                 f"use {OWNED_SBATCH[owned]}")
        return v


class Nodes(_Model):
    """The compute nodes and what each one has."""

    nodelist: str
    gpus_per_node: int = Field(ge=1, le=64)
    gpu_model: str | None = None
    gpu_mem_gb: float = Field(80, gt=0)
    cpus_per_node: int = Field(16, ge=1)
    mem_gb: float = Field(256, gt=0)

    @field_validator("nodelist")
    @classmethod
    def _nodelist(cls, v: str) -> str:
        try:
            hostlist.parse(v)
        except hostlist.HostlistError as exc:
            raise ValueError(str(exc)) from None
        return v

    @property
    def hosts(self) -> list[str]:
        return hostlist.expand(self.nodelist)

    @property
    def gpu_vendor(self) -> Literal["nvidia", "amd", "intel"]:
        """Whose GPUs the nodes have, from ``gpu_model``: AMD Instinct (``MI250X``, ``MI300X``) and
        Intel (``Max 1550``, ``Gaudi2``) by name, NVIDIA otherwise (preflight reads nvidia-smi)."""
        model = (self.gpu_model or "").strip().lower()
        if re.match(r"(amd\b|instinct\b|radeon\b|mi\d)", model):
            return "amd"
        if re.match(r"(intel\b|gaudi|max \d|data center gpu max)", model):
            return "intel"
        return "nvidia"


class SSH(_Model):
    """How preflight reaches the nodes over SSH."""

    user: str | None = None
    port: int = Field(22, ge=1, le=65535)
    jump_host: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    identity_file: str | None = None
    connect_timeout_s: float = Field(10, gt=0)
    command_timeout_s: float = Field(30, gt=0)
    fanout: int = Field(64, ge=1, le=1024)


class Container(_Model):
    """The container each launcher runs in (pyxis: ``srun --container-*``; apptainer: ``apptainer exec``)."""

    runtime: Literal["pyxis", "apptainer"]
    image: str
    mounts: list[str] = Field(default_factory=list)
    env: dict[str, str | int] = Field(
        default_factory=dict, description="variables set inside the container over the image's own "
        "(pyxis: exported and named in --container-env; apptainer: APPTAINERENV_<NAME>)")
    name: str | None = Field(
        None, description="pyxis --container-name: the job's steps share one unpacked container")
    mount_home: bool | None = Field(
        None, description="mount the user's home: false adds --no-container-mount-home (pyxis) or --no-home "
        "(apptainer), true --container-mount-home (pyxis); unset: the runtime's own default")

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, v: list[str]) -> list[str]:
        for m in v:
            if not m.startswith("/"):
                raise ValueError(f"mount {m!r} must be an absolute 'src[:dst]' path")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, Any]) -> dict[str, str]:
        for k, val in v.items():
            problem = container_env_problem(k)
            if problem:
                raise ValueError(problem)
            if "\x00" in str(val):
                raise ValueError(f"{k}: a value cannot hold a NUL byte")
            if len(f"{k}={val}".encode()) > 32 * 4096 - 1:
                raise ValueError(f"{k}: longer than {32 * 4096 - 1} bytes, which Linux refuses to pass to a process "
                                 "(MAX_ARG_STRLEN)")
        return {k: str(val) for k, val in v.items()}

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", v):
            raise ValueError(f"container name {v!r}: use 1-64 letters, digits, '.', '_' and '-'")
        return v

    @model_validator(mode="after")
    def _runtime_options(self) -> Container:
        if self.name is not None and self.runtime != "pyxis":
            raise ValueError("name is pyxis's --container-name; apptainer exec has no named containers")
        return self


class Software(_Model):
    driver_min: str | None = None
    cuda: str | None = None
    modules: list[str] = Field(default_factory=list)
    container: Container | None = None
    nccl_version: str | None = Field(None, description="the NCCL release the site's image (or module) carries, "
                                     "e.g. '2.21.5': the plan assumes it and the job warns when it finds another")

    @field_validator("driver_min", "cuda")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"\d+(\.\d+)*", v):
            raise ValueError(f"{v!r} is not a dotted version like '535.104'")
        return v

    @field_validator("nccl_version")
    @classmethod
    def _nccl_version(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"2\.\d{1,2}(\.\d{1,2})?", v):
            raise ValueError(f"{v!r} is not an NCCL version like '2.21.5' (or '2.21')")
        return v


class RoCE(_Model):
    gid_index: int | None = Field(None, ge=0, le=255)
    traffic_class: int | None = Field(None, ge=0, le=255)
    service_level: int | None = Field(None, ge=0, le=15)


class Network(_Model):
    """The fabric NCCL runs over, and the interfaces that carry it."""

    fabric: Literal["infiniband", "roce", "ethernet", "efa"] = "ethernet"
    hcas: list[str] = Field(default_factory=list, validate_default=True)
    port_rate_gbps: int | None = Field(None, gt=0)
    socket_ifname: str | None = None
    rail_optimized: bool = False
    spine_oversubscribed: bool = Field(False, description="rails joined by an oversubscribed spine: NCCL rings "
                                       "stay on their rail (NCCL_CROSS_NIC=0)")
    roce: RoCE | None = None

    @field_validator("hcas")
    @classmethod
    def _hcas(cls, v: list[str], info: ValidationInfo) -> list[str]:
        fabric = info.data.get("fabric")
        if fabric in ("ethernet", "efa") and v:
            raise ValueError(f"HCAs listed but fabric is {fabric}: HCAs are for infiniband or roce fabrics"
                             + (" (the aws-ofi-nccl plugin finds the EFA devices itself)" if fabric == "efa" else ""))
        if fabric in ("infiniband", "roce") and not v:
            raise ValueError(f"fabric {fabric} needs at least one HCA (e.g. [mlx5_0, mlx5_1])")
        return v

    @field_validator("roce")
    @classmethod
    def _roce(cls, v: RoCE | None, info: ValidationInfo) -> RoCE | None:
        if v is not None and info.data.get("fabric") != "roce":
            raise ValueError(f"roce settings given but fabric is {info.data.get('fabric')}")
        return v


class Storage(_Model):
    path: str
    type: Literal["lustre", "nfs", "gpfs", "beegfs", "local"]
    min_free_gb: float = Field(0, ge=0)
    use: list[Literal["data", "checkpoints", "scratch", "home", "software"]] = Field(default_factory=list)
    timeout_s: float = Field(10, gt=0)
    shared: bool | None = Field(None, description="seen by every node (default: true for lustre, nfs, gpfs, beegfs)")

    @field_validator("path")
    @classmethod
    def _abs(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"storage path {v!r} must be absolute")
        return v

    @property
    def is_shared(self) -> bool:
        return self.shared if self.shared is not None else self.type in ("lustre", "nfs", "gpfs", "beegfs")


class NCCL(_Model):
    env: dict[str, str | int] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _names(cls, v: dict[str, Any]) -> dict[str, str]:
        for k in v:
            if not ENV_NAME.fullmatch(k):
                raise ValueError(f"{k!r} is not an environment variable name")
            if not (k.startswith(NCCL_ENV_PREFIXES) or k in NCCL_ENV_NAMES):
                raise ValueError(f"{k}: nccl.env takes communication settings only: names starting with "
                                 f"{', '.join(NCCL_ENV_PREFIXES)} or one of {', '.join(NCCL_ENV_NAMES)}")
        return {k: str(val) for k, val in v.items()}


class JobSection(_Model):
    """``job:`` (and ``stages.<stage>.job``): what every job on the site gets before its own
    ``--env``/``--setup``/... flags, which are added after these (docs/architecture.md §3)."""

    env: dict[str, str | int] = Field(default_factory=dict)
    setup: list[str] = Field(default_factory=list)
    node_setup: list[str] = Field(default_factory=list)
    srun_args: list[str] = Field(default_factory=list)
    launcher_args: list[str] = Field(default_factory=list)
    venv: str | None = None
    conda: str | None = None
    modules: list[str] = Field(default_factory=list)

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, Any]) -> dict[str, str]:
        for k, val in v.items():
            problem = job_env_problem(k, str(val), site=True)
            if problem:
                raise ValueError(problem)
        return {k: str(val) for k, val in v.items()}


class StageOverride(_Model):
    launcher: Launcher | None = None
    nodes: int | None = Field(None, ge=1)
    time: str | None = None
    partition: str | None = None
    max_restarts: int | None = Field(None, ge=0, le=100)
    container: bool | None = None
    job: JobSection | None = None

    @field_validator("time")
    @classmethod
    def _time(cls, v: str | None) -> str | None:
        return None if v is None else check_slurm_time(v)


class Preflight(_Model):
    """When a Slurm job's nodes are checked, and what is done with bad ones.

    By default the job checks its own nodes as its first step (``in_job``: srun inside the
    allocation, which works where SSH to compute nodes is blocked, ``pam_slurm_adopt``) and
    starts nothing on bad ones.  ``before_submit: true`` adds a check before ``submit`` queues
    the job, over ``transport``, of the nodes the job could get (the partition's idle and mixed
    nodes): for sites where that transport reaches nodes without a job on them.
    """

    policy: Literal["exclude", "refuse"] = Field(
        "exclude", description="before submit: keep failed nodes out of the job (#SBATCH --exclude), or refuse")
    in_job: bool | Literal["perf"] = Field(True, description="Slurm jobs check their allocated nodes (srun) before "
                                           "the launcher starts; perf: with preflight --perf")

    @field_validator("in_job", mode="before")
    @classmethod
    def _in_job(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().lower() == "perf":
            return "perf"
        if isinstance(v, bool):
            return v
        raise ValueError("choose true, false or perf")
    max_excluded_fraction: float = Field(0.1, ge=0, le=1)
    before_submit: bool = Field(False, description="check the nodes the job could get before submitting")
    transport: ProbeTransport = Field("ssh", description="how `clusterkit preflight` and the before-submit check "
                                      "reach nodes: ssh, or srun where compute nodes take no SSH")


class Perf(_Model):
    """``clusterkit preflight --perf``: what a node must measure, and how long the check runs.

    A node is slow below a ``*_min`` figure (when set) or below ``slow_ratio`` times the
    allocation's median.  Bandwidths are nccl-tests' all-reduce busbw in Gbit/s.  The defaults
    finish in about a minute at any node count: the number of rounds, not of nodes, sets the time.
    """

    gemm_tflops_min: float | None = Field(None, gt=0, description="least matmul TFLOP/s per GPU (per task on CPU)")
    busbw_intra_gbps_min: float | None = Field(None, gt=0, description="least all-reduce busbw within a node, Gbit/s")
    busbw_inter_gbps_min: float | None = Field(None, gt=0, description="least all-reduce busbw of a node pair, Gbit/s")
    slow_ratio: float = Field(0.8, gt=0, le=1, description="slow below this fraction of the allocation's median")
    backend: Literal["auto", "nccl", "gloo"] = Field(
        "auto", description="nccl: one task per GPU; gloo: one task per node on the CPU; auto: nccl")
    gemm_n: int | None = Field(None, ge=64, le=32768, description="matrix size (default 8192 on GPU, 1024 on CPU)")
    gemm_iters: int = Field(10, ge=1, le=10000)
    intra_message_mb: float = Field(256, gt=0, le=16384, description="all-reduce message within a node, MB")
    inter_message_mb: float = Field(64, gt=0, le=16384, description="all-reduce message between nodes, MB")
    warmup: int = Field(5, ge=0, le=1000, description="all-reduces before each timed series")
    iters: int = Field(20, ge=1, le=10000, description="timed all-reduces per figure")
    rounds: int = Field(3, ge=2, le=16, description="pairings of the nodes (a node is in rounds or rounds-1 pairs)")
    timeout_s: float = Field(300, gt=0, le=86400, description="the whole check, start-up included")


class Cost(_Model):
    gpu_hour: float = Field(gt=0)
    currency: str = "USD"


class Reliability(_Model):
    """What the checkpoint cadence rests on (job/goodput.py); the defaults are assumptions."""

    gpu_failures_per_hour: float | None = Field(default=None, gt=0, lt=1)   # None: the Llama 3 rate
    checkpoint_save_s: float = Field(default=60, gt=0, le=86400)
    restart_s: float = Field(default=300, ge=0, le=86400)


class Site(_Model):
    """One cluster, validated.  Frozen: build a new one rather than mutate."""

    name: str
    description: str = ""
    scheduler: Scheduler = Field(default_factory=Scheduler)
    nodes: Nodes
    ssh: SSH = Field(default_factory=SSH)
    software: Software = Field(default_factory=Software)
    network: Network = Field(default_factory=Network)
    storage: list[Storage] = Field(default_factory=list)
    nccl: NCCL = Field(default_factory=NCCL)
    job: JobSection = Field(default_factory=JobSection)
    stages: dict[Stage, StageOverride] = Field(default_factory=dict)
    preflight: Preflight = Field(default_factory=Preflight)
    perf: Perf = Field(default_factory=Perf)
    node_history: NodeHistoryKeys = Field(default_factory=NodeHistoryKeys)
    watch: WatchKeys = Field(default_factory=WatchKeys)
    cost: Cost | None = None
    reliability: Reliability = Field(default_factory=Reliability)
    templates: str | None = None

    _source: str = PrivateAttr(default="")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v):
            raise ValueError(f"{v!r}: use letters, digits, '.', '_' and '-'")
        return v

    @model_validator(mode="after")
    def _local_is_one_node(self) -> Site:
        if self.scheduler.kind == "local" and len(self.nodes.hosts) != 1:
            raise ValueError("a local site runs on this machine: nodes.nodelist must name exactly one host")
        return self

    @property
    def source(self) -> str:
        """The file this site was loaded from (empty for sites built in code)."""
        return self._source

    @property
    def shared_storage(self) -> list[Storage]:
        return [s for s in self.storage if s.is_shared]

    def on_shared_storage(self, path: str) -> bool:
        """Whether the absolute ``path`` lies under one of the site's shared storage paths (by name:
        nothing is looked up on this machine)."""
        path = os.path.normpath(path)
        roots = (os.path.normpath(st.path) for st in self.shared_storage)
        return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)

    def stage_override(self, stage: str) -> StageOverride | None:
        """The site's settings for ``stage`` (any stage name; None when the site sets none)."""
        return next((o for name, o in self.stages.items() if name == stage), None)
