"""What a site and stage ask of every node (:class:`Expectations`), as the node checks of
:mod:`clusterkit.preflight.catalogue` (and its parts :mod:`.health` and :mod:`.storage`) read it."""

from __future__ import annotations

from dataclasses import dataclass

from clusterkit.config.schema import Site, Storage
from clusterkit.preflight.capacity import CheckpointNeed


@dataclass(frozen=True)
class StorageExpect:
    """One ``storage:`` entry of the site, as the checks read it."""

    path: str
    type: str  # lustre | nfs | gpfs | beegfs | local
    min_free_gb: float
    writable: bool  # used for checkpoints
    timeout_s: float
    shared: bool  # seen by every node (the site schema decides: Storage.is_shared)

    @classmethod
    def from_config(cls, s: Storage) -> StorageExpect:
        return cls(s.path, s.type, float(s.min_free_gb), "checkpoints" in s.use, float(s.timeout_s), s.is_shared)


@dataclass(frozen=True)
class Expectations:
    """Everything the checks compare against, taken from a site and a stage."""

    stage: str
    gpus_per_node: int
    gpu_model: str | None = None
    driver_min: str | None = None
    cuda_min: str | None = None
    fabric: str = "ethernet"  # infiniband | roce | ethernet
    hcas: tuple[str, ...] = ()
    port_rate_gbps: float | None = None
    storage: tuple[StorageExpect, ...] = ()
    command_timeout_s: float = 30.0
    socket_ifname: str | None = None
    gid_index: int | None = None  # network.roce.gid_index, when pinned
    checkpoint: CheckpointNeed | None = None  # the checkpoints to keep, where a model size is given

    @classmethod
    def from_site(cls, site: Site, stage: str, checkpoint: CheckpointNeed | None = None) -> Expectations:
        """What ``site`` asks of every node at ``stage``."""
        storage = tuple(StorageExpect.from_config(s) for s in site.storage)
        return cls(
            stage=stage,
            gpus_per_node=site.nodes.gpus_per_node,
            gpu_model=site.nodes.gpu_model,
            driver_min=site.software.driver_min,
            cuda_min=site.software.cuda,
            fabric=site.network.fabric,
            hcas=tuple(site.network.hcas),
            port_rate_gbps=site.network.port_rate_gbps,
            storage=storage,
            command_timeout_s=float(site.ssh.command_timeout_s),
            socket_ifname=site.network.socket_ifname,
            gid_index=site.network.roce.gid_index if site.network.roce else None,
            checkpoint=checkpoint,
        )
