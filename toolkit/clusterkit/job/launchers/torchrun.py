"""torchrun (torch.distributed.run) for DDP and FSDP.

One node: a static rendezvous on 127.0.0.1 at the job's port (``CK_PORT``).  Several nodes (the
multi-node and the large-cluster stage alike): one torchrun per node (``srun --ntasks-per-node=1``),
``--nnodes $SLURM_NNODES``, c10d rendezvous at the head (``CK_HEAD``, the first of the hosts the
step runs on) on the job's port, so two jobs sharing a head node don't collide.  Never
``localhost`` as the endpoint: every other node would rendezvous with itself.  c10d gives the
ranks: the head's agent hosts the store whatever order the nodes come in, so a relaunch in the
allocation (clusterkit.supervise) with a spare in a failed node's place needs nothing more.

Nodes reach torchrun minutes apart at scale (an image imported per node, a slow mount): the
rendezvous waits ``--rdzv-conf join_timeout=`` for all of them, 600 s (torch's default) plus 1 s
per node, at most 1,800 s.  The site's ``network.rendezvous_read_timeout_s`` adds ``read_timeout=``: c10d's
TCPStore timeout (torch's default 60 s), how long an agent waits for the store's answer before its log
says ``waitForInput ... timed out`` (on a node whose link is cut: what doctor names the node by; torch
2.14's client then waits for its cancel's answer without a limit, so the agent itself ends only once the
link is back; where the keep-alive's write is the first operation after the cut, its answer has no
timeout at all and only TCP's retransmission limit ends it, docs/admin.md), and about half how long an
agent keeps trying to reach the head's store at start; unset, nothing is written and torch's default
holds (a site that keeps it keeps the launch line it had).

Why not a static rendezvous (``--node-rank`` from the job's node list): tried, and on the Slurm
testbed a link cut under a running job then left the job hanging: the node behind the cut ended its
worker while its link was down (the gloo timeout), srun never heard of that task's end, and the
step never ended; under c10d the node's agent ends only once it hears from the store again.

torchrun's own ``--max-restarts`` is no part of this: a relaunch is clusterkit's (a whole step).

Each rank's output: ``--tee 3`` keeps both streams of every rank in a file and on the console, each
console line prefixed ``[rank<N>]: `` with the global rank (``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``,
which torchrun reads since PyTorch PR #112357 (2023; torch 2.14's ``torch/distributed/run.py`` documents
it); an older torchrun ignores it and prefixes ``[default<local rank>]:``), so
the node's log says which rank wrote each line and ``clusterkit logs --rank`` finds them.  The files
go to ``--log-dir``, one folder per job and restart (``Context.rank_logs``: the run's logs, or
node-local above the site's ``logs.debug_max_nodes``, where 16,384 ranks' folders would be created
at once in one directory of the shared file system); torchrun makes a new folder under it for each
launch, so a relaunch inside the allocation never writes over the one before.  A job that gives
torchrun's ``--tee``, ``--redirects`` or ``--log-dir`` itself (``--launcher-arg``) keeps its own:
clusterkit then sets none of them, nor the prefix.
"""

from __future__ import annotations

from clusterkit.job.launchers import (
    Context,
    Launch,
    PyCommand,
    Sh,
    Word,
    for_script,
    given,
    rendezvous,
    split_python,
)
from clusterkit.job.launchers.torch_floor import floor_note
from clusterkit.job.nccl import EnvVar

_COUNTS = "--nodes and --gpus-per-node (or the stage)"
_RDZV = "clusterkit (the rendezvous at the head of the job's hosts, on the job's port)"
#: torchrun's flags for its per-rank logs: a job that gives one of its own (--launcher-arg) keeps its choice
LOG_FLAGS = ("--tee", "-t", "--log-dir", "--log_dir", "--redirects", "-r")
#: torchrun's prefix for each console line of a tee'd rank: the global rank, as torch's own ``[rank3]:``
PREFIX_TEMPLATE = "[rank${rank}]: "
#: torchrun flags clusterkit writes (``--launcher-arg`` refuses them), and what sets them instead.
OWNED_ARGS = {
    "--nnodes": _COUNTS, "--nproc-per-node": _COUNTS, "--standalone": _RDZV, "--rdzv-backend": _RDZV,
    "--rdzv-endpoint": _RDZV, "--rdzv-id": _RDZV, "--master-addr": _RDZV, "--master-port": _RDZV,
    "--rdzv-conf": "clusterkit (the rendezvous timeout, scaled to the node count; the store's read timeout: "
                   "the site's network.rendezvous_read_timeout_s)",
    "--node-rank": "clusterkit (c10d gives each node its rank)",
    "--no-python": "the command after '--' (python or not)", "-m": "the command after '--' (python -m)",
    "--module": "the command after '--' (python -m)",
}

#: seconds the rendezvous waits for every node to join: torch's default, plus 1 s per node, capped
TIMEOUT_BASE_S, TIMEOUT_MAX_S = 600, 1800

def rendezvous_timeout(nnodes: int) -> int:
    return min(TIMEOUT_BASE_S + nnodes, TIMEOUT_MAX_S)


def rendezvous_conf(ctx: Context) -> str:
    """``--rdzv-conf``'s value: the join timeout, and the store's read timeout where the site sets one."""
    conf = f"join_timeout={rendezvous_timeout(ctx.nnodes)}"
    return conf if ctx.rdzv_read_timeout_s is None else f"{conf},read_timeout={ctx.rdzv_read_timeout_s}"


def torchrun_words(ctx: Context, py: PyCommand) -> list[Word]:
    words: list[Word] = ["torchrun"]
    if ctx.multi:
        words += ["--nnodes", Sh('"$SLURM_NNODES"'), "--nproc-per-node", str(ctx.gpus_per_node),
                  "--rdzv-backend", "c10d", "--rdzv-endpoint", rendezvous(ctx), "--rdzv-id", Sh('"$SLURM_JOB_ID"'),
                  "--rdzv-conf", rendezvous_conf(ctx)]
    else:
        # not --standalone: its store takes a port from the ephemeral range; the job's own port
        # (CK_PORT, below it) keeps two jobs on one node apart and is known before start
        words += ["--nnodes", "1", "--nproc-per-node", str(ctx.gpus_per_node),
                  "--master-addr", "127.0.0.1", "--master-port", Sh('"$CK_PORT"')]
    if own_logs(ctx):
        words += ["--tee", "3", "--log-dir", ctx.rank_logs]
    if not py.is_python:
        words.append("--no-python")   # the command is an executable, not a python script
    elif py.module:
        words.append("-m")
    return words


def own_logs(ctx: Context) -> bool:
    """Whether clusterkit sets torchrun's per-rank logs: not where the job's --launcher-arg sets them."""
    given = any(w == f or w.startswith(f + "=") or (len(f) == 2 and w.startswith(f) and len(w) > 2)
                for w in ctx.launcher_args for f in LOG_FLAGS)
    return bool(ctx.rank_logs) and not given


def prefix_env(ctx: Context) -> tuple[EnvVar, ...]:
    """The rank prefix of each tee'd console line (none where clusterkit does not set torchrun's logs)."""
    if not own_logs(ctx):
        return ()
    return (EnvVar("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", PREFIX_TEMPLATE, "launcher",
                   "torchrun --tee prefixes each rank's console lines with its global rank (an older torchrun, "
                   "before PyTorch PR #112357 (2023), ignores it: [default<local rank>]:), so each line of a "
                   "node's log names its rank",
                   ref="torch/distributed/run.py (--tee, log_line_prefix_template)"),)


def build(ctx: Context) -> Launch:
    py = split_python(ctx.command, "torchrun")
    env = for_script(ctx, "torchrun", "strategy", "micro_batch") + prefix_env(ctx)
    if "strategy" in ctx.settings.model_fields_set:
        notes: tuple[str, ...] = (f"strategy {ctx.settings.strategy}: passed to the training script as CK_STRATEGY, "
                                  "which builds DDP or FSDP; the launch is the same",)
    else:
        notes = ("strategy not given: the training script chooses DDP or FSDP (--set strategy=fsdp passes "
                 "CK_STRATEGY to it); the launch is the same",)
    return Launch("torchrun", "per_node", tuple(torchrun_words(ctx, py)), py.args, notes=notes + floor_note(ctx),
                  env=env, given=given.from_command(py.args))
