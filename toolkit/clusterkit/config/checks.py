"""The site config's sections about checking nodes: when preflight runs and what is done with bad
nodes (``preflight:``), what ``preflight --perf`` measures (``perf:``) (:mod:`clusterkit.config.schema`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from clusterkit.config.model import _Model
from clusterkit.vocab import ProbeTransport


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
    iters: int = Field(20, ge=1, le=10000,
                       description="timed all-reduces per figure, at least (more until they span 0.25 s)")
    rounds: int = Field(3, ge=2, le=16, description="pairings of the nodes (a node is in rounds or rounds-1 pairs)")
    timeout_s: float = Field(300, gt=0, le=86400, description="the whole check, start-up included")
