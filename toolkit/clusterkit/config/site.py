"""Transitional: the names ``clusterkit.config.site`` used to hold, from where they live now.

Models are in :mod:`clusterkit.config.schema`, loading in :mod:`clusterkit.config.load`.  Import
from those; this module goes once nothing imports it.
"""

from __future__ import annotations

from clusterkit.config.load import (
    SiteEntry,
    builtin_sites_dir,
    find_site,
    json_schema,
    list_sites,
    load_file,
    load_file_located,
    load_site,
    search_path,
    validate_data,
)
from clusterkit.config.schema import (
    NCCL,
    NCCL_ENV_NAMES,
    NCCL_ENV_PREFIXES,
    OWNED_SBATCH,
    SSH,
    Container,
    Cost,
    Network,
    Nodes,
    Preflight,
    RoCE,
    Scheduler,
    Site,
    Software,
    StageOverride,
    Storage,
)

__all__ = [
    "NCCL", "NCCL_ENV_NAMES", "NCCL_ENV_PREFIXES", "OWNED_SBATCH", "SSH", "Container", "Cost", "Network", "Nodes",
    "Preflight", "RoCE", "Scheduler", "Site", "SiteEntry", "Software", "StageOverride", "Storage",
    "builtin_sites_dir", "find_site", "json_schema", "list_sites", "load_file", "load_file_located", "load_site",
    "search_path", "validate_data",
]
