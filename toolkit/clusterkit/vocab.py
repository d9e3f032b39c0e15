"""Every closed vocabulary of clusterkit, once: stages with their node ranges, launchers,
preflight transports, scheduler kinds, job states, job ids, and Slurm time (one parser, one validator).

Everything else imports these names; nothing here does I/O (docs/architecture.md §1).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum
from typing import Literal

# --------------------------------------------------------------------------- job ids

# A job id as clusterkit records it and hands it to Slurm: a Slurm job id (``4242``), an array
# task's (``4242_3``), or a local job's controller pid.  Nothing else is one: ``--me`` (an
# option to scancel) or ``1/../x`` (a path) read from a record or from Slurm are refused.
JOB_ID = re.compile(r"[0-9]{1,20}(?:_[0-9]{1,10})?")


def is_job_id(text: str) -> bool:
    """Whether ``text`` is a job id (see :data:`JOB_ID`): ASCII digits only, never a path or an option."""
    return JOB_ID.fullmatch(text) is not None


# --------------------------------------------------------------------------- stages


@dataclass(frozen=True)
class StageSpec:
    name: str
    min_nodes: int
    max_nodes: int | None
    default_nodes: int
    default_launcher: str
    needs_shared_storage: bool
    checks_fabric: bool          # IB/RoCE checks and NCCL fabric policy apply
    wants_parallel_fs: bool      # warn on NFS: metadata storms at scale
    requeue: bool                # preemption trap + requeue budget
    help: str

    @property
    def node_range(self) -> str:
        """``1``, ``2-8`` or ``9+``, as the help and error messages show it."""
        if self.max_nodes == self.min_nodes:
            return str(self.min_nodes)
        return f"{self.min_nodes}-{self.max_nodes}" if self.max_nodes else f"{self.min_nodes}+"


STAGES: dict[str, StageSpec] = {
    "single-node": StageSpec(
        "single-node", 1, 1, 1, "torchrun", False, False, False, True,
        "one machine, many GPUs; torchrun on the job's own port; no IB or shared storage needed"),
    "multi-node": StageSpec(
        "multi-node", 2, 8, 2, "torchrun", True, True, False, True,
        "2-8 nodes; shared NFS/Lustre; RDMA fabric (warned on Ethernet); torchrun c10d rendezvous"),
    "large-cluster": StageSpec(
        "large-cluster", 9, None, 16, "deepspeed", True, True, True, True,
        "9+ nodes; Lustre/GPFS (warned on NFS); containers; deepspeed + hostfile; requeue on preemption"),
}
STAGE_NAMES: tuple[str, ...] = tuple(STAGES)
Stage = Literal["single-node", "multi-node", "large-cluster"]


def stage_for_nodes(nodes: int) -> str:
    """The stage whose node range holds ``nodes`` (single-node 1, multi-node 2-8, large-cluster 9+);
    anything below one node counts as single-node."""
    for spec in STAGES.values():
        if nodes <= spec.min_nodes or spec.max_nodes is None or nodes <= spec.max_nodes:
            return spec.name
    raise AssertionError("the last stage has no upper bound")  # pragma: no cover

# --------------------------------------------------------------------------- launchers, transports, schedulers

LAUNCHERS: tuple[str, ...] = ("torchrun", "deepspeed", "horovod", "accelerate", "megatron", "colossalai", "srun",
                               "mpirun")
Launcher = Literal["torchrun", "deepspeed", "horovod", "accelerate", "megatron", "colossalai", "srun", "mpirun"]
#: a site's own launcher's name (site key ``launchers:``): not a built-in one's
LAUNCHER_NAME = r"[a-z][a-z0-9_-]{0,39}"
#: ``{ck:NAME}`` run-time values of the training command and ``--launcher-arg`` (job/launchers/placeholders.py)
RUN_VALUES: tuple[str, ...] = ("job_id", "node_id", "node_rank", "node_name", "restart", "array_index", "run_dir")
#: the further ``{ck:NAME}`` values a site's own launcher's argv may use (config/launcher_keys.py)
LAUNCHER_VALUES: tuple[str, ...] = ("rdzv_host", "rdzv_port", "nnodes", "nproc_per_node", "world_size", "hostfile")

# how preflight reaches the nodes (nodes/transport/)
TRANSPORTS: tuple[str, ...] = ("ssh", "srun", "local")
Transport = Literal["ssh", "srun", "local"]
# the remote transports only: how `sites init` / `sites drift` read node facts, and the site's
# preflight.transport (a local site always checks this machine)
PROBE_TRANSPORTS: tuple[str, ...] = ("ssh", "srun")
ProbeTransport = Literal["ssh", "srun"]

SCHEDULER_KINDS: tuple[str, ...] = ("slurm", "local")
SchedulerKind = Literal["slurm", "local"]

# --------------------------------------------------------------------------- job states


class JobState(str, Enum):
    """A job's state in Slurm's words (squeue/sacct/scontrol), plus clusterkit's own three:
    ``SUBMITTED`` (just handed over), ``UNKNOWN`` (the scheduler said nothing usable) and
    ``LOST`` (neither the scheduler nor a result file knows the job any more)."""

    SUBMITTED = "SUBMITTED"
    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"
    REQUEUED = "REQUEUED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    REQUEUE_FED = "REQUEUE_FED"
    RESIZING = "RESIZING"
    SUSPENDED = "SUSPENDED"
    STOPPED = "STOPPED"
    SIGNALING = "SIGNALING"
    STAGE_OUT = "STAGE_OUT"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    NODE_FAIL = "NODE_FAIL"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    PREEMPTED = "PREEMPTED"
    REVOKED = "REVOKED"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    LOST = "LOST"
    UNKNOWN = "UNKNOWN"

    @property
    def is_terminal(self) -> bool:
        """After this state the job never runs again (a requeued job passes through REQUEUED,
        PENDING, never these)."""
        return self in _TERMINAL

    @classmethod
    def parse(cls, text: str) -> JobState:
        """Slurm's text (``CANCELLED by 0``, ``COMPLETED+``, ``RUNNING``) -> the state;
        ``UNKNOWN`` for anything else."""
        word = text.strip().split(" ")[0].rstrip("+*").upper() if text.strip() else ""
        try:
            return cls(word)
        except ValueError:
            return cls.UNKNOWN

    def __str__(self) -> str:
        return self.value


_TERMINAL = frozenset({
    JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT, JobState.OUT_OF_MEMORY,
    JobState.NODE_FAIL, JobState.BOOT_FAIL, JobState.DEADLINE, JobState.PREEMPTED, JobState.REVOKED,
    JobState.SPECIAL_EXIT, JobState.LOST,
})

# --------------------------------------------------------------------------- Slurm time

# sbatch --time: "minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours",
# "days-hours:minutes" and "days-hours:minutes:seconds"
_SLURM_TIME = re.compile(r"(?:(?P<days>\d+)-(?P<dh>\d+)(?::(?P<dm>\d{1,2})(?::(?P<ds>\d{1,2}))?)?"
                         r"|(?P<a>\d+)(?::(?P<b>\d{1,2})(?::(?P<c>\d{1,2}))?)?)")
SLURM_TIME_FORMS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"


class SlurmTimeError(ValueError):
    """Not a Slurm time; the message says which forms are."""


def slurm_time_seconds(text: str) -> int | None:
    """The one parser of a Slurm time: seconds in ``text`` exactly as written (zero allowed),
    None when it is not one of Slurm's forms.  :func:`slurm_seconds` validates input with it;
    :func:`clusterkit.slurmtext.parse_time` reads Slurm's output with it."""
    if len(text) > 32 or not text.isascii():  # no Slurm time is longer; no int() past its digit limit
        return None
    m = _SLURM_TIME.fullmatch(text)
    if m is None:
        return None
    g = {k: int(v) for k, v in m.groupdict().items() if v is not None}
    if "days" in g:
        return g["days"] * 86400 + g["dh"] * 3600 + g.get("dm", 0) * 60 + g.get("ds", 0)
    if "c" in g:
        return g["a"] * 3600 + g["b"] * 60 + g["c"]
    return g["a"] * 60 + g.get("b", 0)


def slurm_seconds(text: str) -> int:
    """Seconds in a Slurm time limit (``90`` -> 5400, ``1-12`` -> 129600, ``12:00:00`` -> 43200).

    Raises :class:`SlurmTimeError` for anything sbatch would not take as a positive limit, and for
    surrounding whitespace (a newline in a ``#SBATCH`` line would end it).
    """
    seconds = slurm_time_seconds(text) if isinstance(text, str) else None
    if seconds is None:
        raise SlurmTimeError(f"{text!r} is not a Slurm time ({SLURM_TIME_FORMS})")
    if seconds <= 0:
        raise SlurmTimeError(f"{text!r}: a time limit must be longer than zero")
    return seconds


def check_slurm_time(text: str) -> str:
    """``text`` unchanged when it is a Slurm time limit; :class:`SlurmTimeError` otherwise."""
    slurm_seconds(text)
    return text


def slurm_minutes(text: str) -> float:
    """A Slurm time limit in minutes (submitit's local executor counts its timeout in minutes)."""
    return slurm_seconds(text) / 60


_SHARE = re.compile(r"^(\d{1,3}(?:\.\d{1,2})?)%$")


def check_spares(value: int | str | None) -> int | str | None:
    """A site's ``spares``: a count (0-1000) or a share of the job's nodes (``3%``, at most 100%)."""
    if value is None or isinstance(value, bool):
        if isinstance(value, bool):
            raise ValueError("use a count of nodes or a share like 3%, not true/false")
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 4:
        value = int(value)   # a site file's number, kept as its text where a field also takes text
    if isinstance(value, int):
        if not 0 <= value <= 1000:
            raise ValueError(f"{value} is not a count of spare nodes (0-1000)")
        return value
    m = _SHARE.match(value)
    if not m or float(m.group(1)) > 100:
        raise ValueError(f"{value!r} is neither a count of nodes nor a share like 3%")
    return value


def spares_for(value: int | str, nodes: int) -> int:
    """Spare nodes for a job of ``nodes`` nodes: a count as it is, a share of them rounded up
    (at least one where the share is above 0)."""
    if isinstance(value, int):
        return value
    m = _SHARE.match(value)
    if not m:
        raise ValueError(f"{value!r} is neither a count nor a share like 3%")
    share = float(m.group(1))
    return max(1, math.ceil(nodes * share / 100 - 1e-9)) if share > 0 else 0
