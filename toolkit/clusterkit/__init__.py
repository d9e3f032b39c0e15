"""clusterkit: from a laptop to a thousand-GPU Slurm cluster, one plan at a time.

The Python API (``docs/api.md``): :class:`Site`, :class:`Plan`, :class:`RunDir`, :class:`Job`,
:class:`JobResult`, :func:`jobs`, and the error family in :mod:`clusterkit.errors`.  The names
are imported on first use, so ``import clusterkit`` (and ``clusterkit --help``) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from clusterkit._version import __version__

if TYPE_CHECKING:
    from clusterkit.api import Job, JobResult, LogLine, Plan, RunDir, Site, WaitTimeout, diagnose_logs, jobs
    from clusterkit.errors import (
        ClusterkitError,
        ConfigError,
        InputError,
        PlanError,
        PreflightError,
        RecordError,
        RunDirError,
        SnapshotError,
        SubmitError,
    )
    from clusterkit.heartbeat import progress

__all__ = [
    "ClusterkitError", "ConfigError", "InputError", "Job", "JobResult", "LogLine", "Plan", "PlanError",
    "PreflightError", "RecordError", "RunDir", "RunDirError", "Site", "SnapshotError", "SubmitError", "WaitTimeout",
    "__version__", "diagnose_logs", "jobs", "progress",
]
_ERRORS = frozenset(n for n in __all__ if n.endswith("Error"))


def __getattr__(name: str) -> Any:
    """The public names, imported when first asked for (PEP 562)."""
    if name == "progress":   # the training script's side: the standard library only
        return importlib.import_module("clusterkit.heartbeat").progress
    if name in _ERRORS:
        return getattr(importlib.import_module("clusterkit.errors"), name)
    if name in __all__:
        return getattr(importlib.import_module("clusterkit.api"), name)
    raise AttributeError(f"module 'clusterkit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
