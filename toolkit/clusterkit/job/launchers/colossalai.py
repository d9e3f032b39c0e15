"""ColossalAI: ``colossalai run --nproc_per_node G --hostfile H`` once, on the batch host.

ColossalAI's hostfile is one bare hostname per line (no slots), and ``colossalai run`` reaches
the other hosts over SSH.  It runs python scripts only.
"""

from __future__ import annotations

from clusterkit.errors import PlanError
from clusterkit.job.launchers import BARE, Context, Launch, Sh, Word, split_python

#: colossalai run flags clusterkit writes (``--launcher-arg`` refuses them), and what sets them instead.
OWNED_ARGS = {
    "--nproc_per_node": "--gpus-per-node", "--num_nodes": "--nodes (or the stage)",
    "--hostfile": "clusterkit (the hostfile written from the allocation)", "--include": "--exclude",
    "--exclude": "--exclude", "--master_addr": "clusterkit (the allocation's first host)",
    "--master_port": "clusterkit (the job's port)",
}


def build(ctx: Context) -> Launch:
    py = split_python(ctx.command, "colossalai")
    if not py.is_python or py.module:
        raise PlanError("colossalai run starts a python script: use -- python train.py ...")
    if ctx.container and ctx.multi:
        raise PlanError("colossalai run starts workers over SSH, outside the site's container; "
                        "use torchrun, or --set container=false")
    if not py.args[0].endswith(".py"):
        # colossalai run skips a script without the suffix and exits 0: the job would "succeed"
        raise PlanError(f"colossalai run only starts files ending in .py, not {py.args[0]!r}: rename the script")
    words: list[Word] = ["colossalai", "run", "--nproc_per_node", str(ctx.gpus_per_node)]
    if ctx.multi:
        words += ["--hostfile", Sh('"$CK_HOSTFILE"'), "--master_addr", Sh('"$CK_HEAD"')]
    words += ["--master_port", Sh('"$CK_PORT"')]   # its default, 29500, collides between jobs
    return Launch("colossalai", "once", tuple(words), py.args, dialect=BARE if ctx.multi else None)
