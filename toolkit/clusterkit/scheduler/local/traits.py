"""The local executor's :class:`~clusterkit.scheduler.kind_traits.Traits`: one machine, no queue, no
accounting; the job runs under clusterkit, so ``submit`` waits for it.  Pure."""

from __future__ import annotations

from clusterkit.scheduler.kind_traits import Traits

TRAITS = Traits(kind="local", label="this machine (local executor)", who="local executor", allocates=False,
                queued=False, accounted=False, holds=False, runs_arrays=False, submit_waits=True)
