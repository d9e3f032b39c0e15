"""Slurm's :class:`~clusterkit.scheduler.kind_traits.Traits`.  Pure."""

from __future__ import annotations

from clusterkit.scheduler.kind_traits import Traits

TRAITS = Traits(kind="slurm", label="Slurm", who="slurm", allocates=True, queued=True, accounted=True,
                holds=True, runs_arrays=True, submit_waits=False)
