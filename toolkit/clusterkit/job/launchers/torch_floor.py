"""torch's version floor for torchrun at the large-cluster stage: a plan note, not an error.

torch 2.4 made the libuv TCPStore server its default (the 2.4 release notes and PyTorch's tutorial
"Introduction to Libuv TCPStore Backend": much shorter store initialization beyond about 1,024
ranks).  The torch is known only where the pipeline could read it on the submit host
(:attr:`Context.torch_version`, from the job's ``--venv``/``--conda``).
"""

from __future__ import annotations

from clusterkit.job.launchers import Context

FLOOR = (2, 4)


def floor_note(ctx: Context) -> tuple[str, ...]:
    from clusterkit.job.torch_version import below

    if ctx.stage != "large-cluster" or ctx.torch_version is None or not below(ctx.torch_version, FLOOR):
        return ()
    return (f"torch {ctx.torch_version} (the job's environment) is below 2.4: its TCP store has no libuv server, "
            f"and store initialization is slow at {ctx.nnodes} nodes; torch 2.4 or later is advised",)
