"""The site config's sections about the machines: the nodes, how preflight reaches them over SSH,
the network NCCL runs over, and the storage (:mod:`clusterkit.config.schema`)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from clusterkit import hostlist
from clusterkit.config.model import _Model
from clusterkit.config.topology_keys import NetworkTopology


class Nodes(_Model):
    """The compute nodes and what each one has."""

    nodelist: str
    gpus_per_node: int = Field(ge=1, le=64)
    gpu_model: str | None = None
    gpu_mem_gb: float = Field(80, gt=0)
    cpus_per_node: int = Field(16, ge=1)
    mem_gb: float = Field(256, gt=0)
    gpu_bind: Literal["task", "none"] = Field(
        "none", description="--launcher srun: task gives each task its own GPU (cuda:0 is the task's), none "
        "lets every task see the node's GPUs (cuda:LOCAL_RANK); a job's --set gpu_bind wins")

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


class RoCE(_Model):
    gid_index: int | None = Field(None, ge=0, le=255)
    traffic_class: int | None = Field(None, ge=0, le=255)
    service_level: int | None = Field(None, ge=0, le=15)


#: a host-name suffix (``i``, ``-ib``, ``.ib.cluster``) and a Linux interface name (at most 15 bytes)
_SUFFIX = re.compile(r"[A-Za-z0-9.-]{1,63}")
_IFNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")
#: the shortest read timeout of torchrun's c10d store a site may give, seconds (docs/admin.md, "The
#: rendezvous store's read timeout"): a store op on a healthy store answers in milliseconds and the
#: agents poll every second, but a non-head agent gives up on a head whose store is not up yet after
#: about twice this (a head whose torchrun starts seconds late: python importing torch on a busy node)
RDZV_READ_TIMEOUT_MIN_S, RDZV_READ_TIMEOUT_MAX_S = 10, 3600


class RendezvousHost(_Model):
    """How the launchers name the rendezvous (master) host: the head node's name with ``suffix``
    appended, or the IPv4 address of the head node's ``interface``, read on that node at run time.
    Unset: the head node's name as Slurm lists it."""

    suffix: str | None = Field(None, description="appended to the head node's name: gpu001 + 'i' -> gpu001i")
    interface: str | None = Field(None, description="the head node's interface whose IPv4 address is the "
                                  "rendezvous host (read on that node when the job runs)")

    @field_validator("suffix")
    @classmethod
    def _suffix(cls, v: str | None) -> str | None:
        if v is not None and (not _SUFFIX.fullmatch(v) or ".." in v):
            raise ValueError(f"suffix {v!r}: 1-63 letters, digits, '.' and '-' (a host name's tail, e.g. 'i' or '-ib')")
        return v

    @field_validator("interface")
    @classmethod
    def _interface(cls, v: str | None) -> str | None:
        if v is not None and not _IFNAME.fullmatch(v):
            raise ValueError(f"interface {v!r}: a network interface name, 1-15 letters, digits, '_', '.' and '-'")
        return v

    @model_validator(mode="after")
    def _one(self) -> RendezvousHost:
        if (self.suffix is None) == (self.interface is None):
            raise ValueError("give one of suffix (the head's name + suffix) or interface (its address on that "
                             "interface)")
        return self


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
    rendezvous_host: RendezvousHost | None = None
    rendezvous_read_timeout_s: int | None = Field(
        None, description="torchrun's c10d store read timeout (--rdzv-conf read_timeout=): how long an agent "
        "waits for the rendezvous store's answer before its log says it timed out (a node whose link is cut), "
        "and about half how long an agent keeps trying to reach the head's store at start; unset: torch's "
        f"default, 60 s (not written); at least {RDZV_READ_TIMEOUT_MIN_S}",
        json_schema_extra={"minimum": RDZV_READ_TIMEOUT_MIN_S, "maximum": RDZV_READ_TIMEOUT_MAX_S})
    topology: NetworkTopology | None = None

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

    @field_validator("rendezvous_read_timeout_s")
    @classmethod
    def _read_timeout(cls, v: int | None) -> int | None:
        if v is not None and not RDZV_READ_TIMEOUT_MIN_S <= v <= RDZV_READ_TIMEOUT_MAX_S:
            raise ValueError(f"{v}: {RDZV_READ_TIMEOUT_MIN_S} to {RDZV_READ_TIMEOUT_MAX_S} seconds (below "
                             f"{RDZV_READ_TIMEOUT_MIN_S}, an agent that starts before the head's store is up, or "
                             "a store busy for seconds, fails the rendezvous); unset: torch's default, 60 s")
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
