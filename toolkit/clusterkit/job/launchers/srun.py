"""srun: one task per GPU, no launcher in between; each task learns its rank from Slurm.

``RANK=$SLURM_PROCID``, ``LOCAL_RANK=$SLURM_LOCALID`` and ``WORLD_SIZE=$SLURM_NTASKS`` are expanded
by each task (escaped in the job script), and ``MASTER_ADDR``/``MASTER_PORT`` come from the head
node, so torch's ``env://`` init works unchanged.
"""

from __future__ import annotations

from clusterkit.errors import PlanError
from clusterkit.job.launchers import Context, Launch, for_script, split_python


def build(ctx: Context) -> Launch:
    if not ctx.slurm:
        raise PlanError("the srun launcher needs a Slurm site; on a local site use torchrun")
    split_python(ctx.command, "srun")  # a command is required
    notes = (f"{ctx.gpus_per_node} tasks per node x {ctx.nnodes} nodes = world {ctx.world_size}",)
    return Launch("srun", "per_gpu", (), tuple(ctx.command), notes=notes,
                  env=for_script(ctx, "srun", "micro_batch"))
