"""Open MPI's ``mpirun``: once, on the batch host, ``-np <world> --map-by ppr:G:node`` over the job's hosts.

Under Slurm, mpirun reads the allocation from Slurm and starts its daemons (``orted``) on the other
nodes with Slurm's own srun (Open MPI's ``plm slurm``, ``--nodelist`` those hosts); ``--hostfile``
(Open MPI's ``host slots=N`` lines, written from the hosts the job launches on) keeps it to them,
not the spares or the nodes the job's preflight dropped.  Open MPI counts Slurm's tasks per node as
a host's slots, one (clusterkit allocates a task a node, the launcher starts the ranks), so G ranks
a host need ``--oversubscribe`` (seen with Slurm's variables and ``--do-not-launch``: without it
Open MPI refuses; with ``--mca ras ^slurm`` instead, the hostfile's slots count, but plm slurm's
srun loses its ``--nodelist`` (its argv recorded) and the testbed ran every rank on the batch host).  An
MPI program then yields the CPU while it waits (``mpi_yield_when_idle``; ``--env
OMPI_MCA_mpi_yield_when_idle=0`` turns that off).  ``--map-by ppr:G:node`` puts
G ranks on each.  On a local site: ``--host localhost:G``.  Each rank starts through a small
``bash -c`` that sets torch's ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``
from Open MPI's ``OMPI_COMM_WORLD_*``, so ``env://`` init works unchanged (``MASTER_ADDR`` and
``MASTER_PORT`` are the job's rendezvous host and port, sent with ``-x`` as every variable of the
job's environment is).  ``--bind-to none``: Open MPI would otherwise pin each rank to one core (at
two ranks or fewer) or one socket, which starves a training process's data loaders; a
``--launcher-arg=--bind-to=...`` comes later and wins.

Open MPI refuses to run as root unless told twice; the job script tells it
(``OMPI_ALLOW_RUN_AS_ROOT``, ``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM``) only when it runs as root.

Intel MPI's ``mpirun`` (Hydra) differs: ``-n``/``-ppn`` instead of ``-np``/``--map-by``, a
``-f`` hostfile of ``host:N`` lines, ``-genv``/``-genvlist`` instead of ``-x``, ``PMI_RANK``
instead of ``OMPI_COMM_WORLD_RANK``, and under Slurm ``I_MPI_HYDRA_BOOTSTRAP=slurm``; it is not
built in: a site declares it under ``launchers:`` (docs/admin.md).
"""

from __future__ import annotations

from clusterkit.errors import PlanError
from clusterkit.job.launchers import SLOTS, Context, Launch, Sh, Word, split_python

_COUNTS = "--nodes and --gpus-per-node (or the stage)"
_HOSTS = "clusterkit (the hosts the job launches on)"
_MAP = "--gpus-per-node (ppr:G:node: G ranks on each node)"
#: mpirun flags clusterkit writes (``--launcher-arg`` refuses them), and what sets them instead.
OWNED_ARGS = {
    "-np": _COUNTS, "-n": _COUNTS, "--np": _COUNTS, "-c": _COUNTS, "--n": _COUNTS,
    "-N": _MAP, "--npernode": _MAP, "-npernode": _MAP, "--npersocket": _MAP, "-npersocket": _MAP,
    "--map-by": _MAP, "-map-by": _MAP, "--ppr": _MAP,
    "--hostfile": _HOSTS, "-hostfile": _HOSTS, "--machinefile": _HOSTS, "-machinefile": _HOSTS,
    "--default-hostfile": _HOSTS, "--host": _HOSTS, "-host": _HOSTS, "-H": _HOSTS,
    "--allow-run-as-root": "clusterkit (only when the job runs as root)",
    "--app": "the command after '--'",
}

#: how each rank learns torch's names for its place, from Open MPI's (a literal script: the values are Open MPI's)
RANKS = ('export RANK="$OMPI_COMM_WORLD_RANK" LOCAL_RANK="$OMPI_COMM_WORLD_LOCAL_RANK" '
         'WORLD_SIZE="$OMPI_COMM_WORLD_SIZE" LOCAL_WORLD_SIZE="$OMPI_COMM_WORLD_LOCAL_SIZE"; exec "$@"')
#: Open MPI runs as root only with both set; the job script sets them only when it runs as root
ROOT = ('if [ "$(id -u)" = 0 ]; then   # Open MPI refuses root unless told twice',
        "  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
        "fi")
#: the job's variables every rank reads besides the job's environment (exported by the job script)
SENT = ("MASTER_ADDR", "MASTER_PORT", "CK_RUN_DIR", "CK_JOB_ID", "CK_RESTART_COUNT", "CK_CHECKPOINT_DIR")


def extra_args(ctx: Context) -> tuple[str, ...]:
    return ()   # build() puts the --launcher-arg words before the rank wrapper


def build(ctx: Context) -> Launch:
    split_python(ctx.command, "mpirun")   # a command is required
    if ctx.container and ctx.multi:
        raise PlanError("mpirun across nodes starts its daemons through srun, outside the site's container; "
                        "use torchrun/srun, or --set container=false")
    g = ctx.gpus_per_node
    words: list[Word] = ["mpirun", "-np", str(ctx.world_size), "--map-by", f"ppr:{g}:node", "--bind-to", "none"]
    # under Slurm Open MPI takes Slurm's tasks per node as each host's slots (one: clusterkit allocates
    # a task a node), and the hostfile only picks the hosts: G ranks a host need --oversubscribe
    words += (["--oversubscribe", "--hostfile", Sh('"$CK_HOSTFILE"')] if ctx.slurm
              else ["--host", f"localhost:{g}"])
    words += [*ctx.launcher_args, "bash", "-c", RANKS, "clusterkit-rank"]
    notes = (f"-np {ctx.world_size} = {ctx.nnodes} hosts x {g} ranks (--map-by ppr:{g}:node); RANK, LOCAL_RANK, "
             "WORLD_SIZE from OMPI_COMM_WORLD_*",)
    return Launch("mpirun", "once", tuple(words), tuple(ctx.command), dialect=SLOTS if ctx.slurm else None,
                  notes=notes, setup=ROOT, env_flag="-x", env_sent=SENT)
