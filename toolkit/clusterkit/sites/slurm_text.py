"""The parsers of Slurm's admin commands' text, which the Slurm scheduler owns
(:mod:`clusterkit.scheduler.slurm.admin_text`), under the name the site tools use."""

from __future__ import annotations

from clusterkit.scheduler.slurm.admin_text import (
    Gres,
    Node,
    Nodes,
    Partition,
    Partitions,
    SlurmConfig,
    gpu_model_token,
    is_mig_type,
    parse_config,
    parse_gres,
    parse_nodes,
    parse_partitions,
    parse_tres,
)

__all__ = ["Gres", "Node", "Nodes", "Partition", "Partitions", "SlurmConfig", "gpu_model_token", "is_mig_type",
           "parse_config", "parse_gres", "parse_nodes", "parse_partitions", "parse_tres"]
