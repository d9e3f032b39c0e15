"""torchrun (torch.distributed.run) for DDP and FSDP.

One node: a static rendezvous on 127.0.0.1 at the job's port (``CK_PORT``).  Several nodes: one torchrun per
node (``srun --ntasks-per-node=1``), ``--nnodes $SLURM_NNODES``, c10d rendezvous at the first host
of the allocation on a port derived from the job id, so two jobs sharing a head node don't collide.
Never ``localhost`` as the endpoint: every other node would rendezvous with itself.
"""

from __future__ import annotations

from clusterkit.job.launchers import Context, Launch, PyCommand, Sh, Word, for_script, given, rendezvous, split_python

_COUNTS = "--nodes and --gpus-per-node (or the stage)"
_RDZV = "clusterkit (the rendezvous at the allocation's first host, on the job's port)"
#: torchrun flags clusterkit writes (``--launcher-arg`` refuses them), and what sets them instead.
OWNED_ARGS = {
    "--nnodes": _COUNTS, "--nproc-per-node": _COUNTS, "--standalone": _RDZV, "--rdzv-backend": _RDZV,
    "--rdzv-endpoint": _RDZV, "--rdzv-id": _RDZV, "--master-addr": _RDZV, "--master-port": _RDZV,
    "--node-rank": "clusterkit (each node's rank comes from the allocation)",
    "--no-python": "the command after '--' (python or not)", "-m": "the command after '--' (python -m)",
    "--module": "the command after '--' (python -m)",
}


def torchrun_words(ctx: Context, py: PyCommand) -> list[Word]:
    words: list[Word] = ["torchrun"]
    if ctx.multi:
        words += ["--nnodes", Sh('"$SLURM_NNODES"'), "--nproc-per-node", str(ctx.gpus_per_node),
                  "--rdzv-backend", "c10d", "--rdzv-endpoint", rendezvous(ctx),
                  "--rdzv-id", Sh('"$SLURM_JOB_ID"')]
    else:
        # not --standalone: its store takes a port from the ephemeral range; the job's own port
        # (CK_PORT, below it) keeps two jobs on one node apart and is known before start
        words += ["--nnodes", "1", "--nproc-per-node", str(ctx.gpus_per_node),
                  "--master-addr", "127.0.0.1", "--master-port", Sh('"$CK_PORT"')]
    if not py.is_python:
        words.append("--no-python")   # the command is an executable, not a python script
    elif py.module:
        words.append("-m")
    return words


def build(ctx: Context) -> Launch:
    py = split_python(ctx.command, "torchrun")
    env = for_script(ctx, "torchrun", "strategy", "micro_batch")
    if "strategy" in ctx.settings.model_fields_set:
        notes = (f"strategy {ctx.settings.strategy}: passed to the training script as CK_STRATEGY, which builds "
                 "DDP or FSDP; the launch is the same",)
    else:
        notes = ("strategy not given: the training script chooses DDP or FSDP (--set strategy=fsdp passes "
                 "CK_STRATEGY to it); the launch is the same",)
    return Launch("torchrun", "per_node", tuple(torchrun_words(ctx, py)), py.args, notes=notes, env=env,
                  given=given.from_command(py.args))
