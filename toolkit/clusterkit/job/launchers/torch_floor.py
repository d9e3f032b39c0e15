"""torch's version floor for torchrun at the large-cluster stage: a plan note, not an error.

Before torch 2.4 the rendezvous ahead of the ranks' start grew with the square of the node count
(PyTorch PR #124982: 4,000 hosts, 373 s -> 10 s).  The torch is known only where the pipeline could
read it on the submit host (:attr:`Context.torch_version`, from the job's ``--venv``/``--conda``).
"""

from __future__ import annotations

from clusterkit.job.launchers import Context

FLOOR = (2, 4)


def floor_note(ctx: Context) -> tuple[str, ...]:
    from clusterkit.job.torch_version import below

    if ctx.stage != "large-cluster" or ctx.torch_version is None or not below(ctx.torch_version, FLOOR):
        return ()
    return (f"torch {ctx.torch_version} (the job's environment) is below 2.4: its rendezvous grows with the square "
            f"of the node count (PyTorch PR #124982), minutes at {ctx.nnodes} nodes; torch 2.4 or later is advised",)
