"""torchrun (torch.distributed.run) for DDP and FSDP.

One node: a static rendezvous on 127.0.0.1 at the job's port (``CK_PORT``).  Several nodes (the
multi-node and the large-cluster stage alike): one torchrun per node (``srun --ntasks-per-node=1``)
and a *static* rendezvous from Slurm's fixed membership: ``--nnodes $SLURM_NNODES``, the head
(``CK_HEAD``, the first of the hosts the step runs on) and the job's port as ``--master-addr`` /
``--master-port``, and each node's ``--node-rank`` its place in ``CK_NODELIST``.  Never
``localhost`` as the head: every other node would rendezvous with itself.

Why static, not c10d.  Slurm fixes the membership before any node starts: there is nothing for a
dynamic rendezvous to negotiate.  c10d's rounds sync the whole rendezvous state through one store
for every joining node, and before torch 2.4 the TCP store every rank connects to had no libuv server
(its 2.4 release notes: store initialization "significantly" faster for large jobs); a static rendezvous is one TCP
store on the head that every node connects to once.  Nodes reach torchrun minutes apart at scale (an
image imported per node, a ``--node-setup``): the store waits ``--rdzv-conf timeout=`` for all of
them, 600 s (torch's default) plus 1 s per node, at most 1,800 s.  The same launch at multi-node
keeps one code path that the Slurm testbed runs.

Why the node rank is not ``$SLURM_NODEID``.  Static rendezvous needs node rank 0 on the head.  Slurm
numbers a step's nodes in its own order of the step's node list, while in-allocation recovery
(clusterkit.supervise) relaunches the step with a spare *in the place of* the node it replaces
(``--nodelist`` in that order, ``CK_HEAD`` its first, ``CK_NODELIST`` exported again): the first
node may then not be Slurm's node 0.  Each node's rank is therefore its own name's
(``$SLURMD_NODENAME``) position in ``CK_NODELIST``: the head is rank 0 whatever the order, on the
first launch and on every relaunch.  A node not in that list says so on stderr and torchrun refuses
the empty ``--node-rank``.

torchrun's own ``--max-restarts`` is no part of this: a relaunch is clusterkit's (a whole step).
"""

from __future__ import annotations

from clusterkit.job.launchers import Context, Launch, PyCommand, Sh, Word, for_script, given, split_python
from clusterkit.job.launchers.torch_floor import floor_note

_COUNTS = "--nodes and --gpus-per-node (or the stage)"
_RDZV = "clusterkit (a static rendezvous at the head of the job's hosts, on the job's port)"
#: torchrun flags clusterkit writes (``--launcher-arg`` refuses them), and what sets them instead.
OWNED_ARGS = {
    "--nnodes": _COUNTS, "--nproc-per-node": _COUNTS, "--standalone": _RDZV, "--rdzv-backend": _RDZV,
    "--rdzv-endpoint": _RDZV, "--rdzv-id": _RDZV, "--master-addr": _RDZV, "--master-port": _RDZV,
    "--rdzv-conf": "clusterkit (the rendezvous timeout, scaled to the node count)",
    "--node-rank": "clusterkit (each node's rank comes from the job's host list)",
    "--no-python": "the command after '--' (python or not)", "-m": "the command after '--' (python -m)",
    "--module": "the command after '--' (python -m)",
}

#: seconds the static rendezvous waits for every node: torch's default, plus 1 s per node, capped
TIMEOUT_BASE_S, TIMEOUT_MAX_S = 600, 1800

#: this node's place in CK_NODELIST (the head is 0), expanded by each node; empty (and a line on
#: stderr) when the node is not in the list
NODE_RANK = Sh('"$(set -f; IFS=,; i=0; for h in $CK_NODELIST; do [ "$h" = "$SLURMD_NODENAME" ] && '
               '{ echo "$i"; exit 0; }; i=$((i + 1)); done; '
               'echo "clusterkit: this node ($SLURMD_NODENAME) is not in CK_NODELIST: no node rank" >&2)"')


def rendezvous_timeout(nnodes: int) -> int:
    return min(TIMEOUT_BASE_S + nnodes, TIMEOUT_MAX_S)


def torchrun_words(ctx: Context, py: PyCommand) -> list[Word]:
    words: list[Word] = ["torchrun"]
    if ctx.multi:
        words += ["--nnodes", Sh('"$SLURM_NNODES"'), "--nproc-per-node", str(ctx.gpus_per_node),
                  "--rdzv-backend", "static", "--master-addr", Sh('"$CK_HEAD"'), "--master-port", Sh('"$CK_PORT"'),
                  "--node-rank", NODE_RANK, "--rdzv-id", Sh('"$SLURM_JOB_ID"'),
                  "--rdzv-conf", f"timeout={rendezvous_timeout(ctx.nnodes)}"]
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
        notes: tuple[str, ...] = (f"strategy {ctx.settings.strategy}: passed to the training script as CK_STRATEGY, "
                                  "which builds DDP or FSDP; the launch is the same",)
    else:
        notes = ("strategy not given: the training script chooses DDP or FSDP (--set strategy=fsdp passes "
                 "CK_STRATEGY to it); the launch is the same",)
    return Launch("torchrun", "per_node", tuple(torchrun_words(ctx, py)), py.args, notes=notes + floor_note(ctx),
                  env=env, given=given.from_command(py.args))
