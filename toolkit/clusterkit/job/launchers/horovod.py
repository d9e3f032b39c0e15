"""Horovod: ``horovodrun -np <total slots> -H host1:G,host2:G`` once, on the batch host.

horovodrun starts the workers itself (over SSH/MPI on several nodes), so it runs once per job,
not once per node.  ``-np`` is the total slot count; the ``-H`` list is built from the
allocation at run time (``CK_HOSTS_SLOTS``), and the same hosts go into a ``host slots=N``
hostfile for ``--hostfile`` users.

Ports: horovodrun's Gloo rendezvous server binds a random free port itself (any of 1024-65535,
taken at bind time); no horovodrun flag pins it to the job's ``CK_PORT``.
"""

from __future__ import annotations

from clusterkit.job.launchers import SLOTS, Context, Launch, Sh, Word

#: horovodrun flags clusterkit writes (``--launcher-arg`` refuses them), and what sets them instead.
OWNED_ARGS = {
    "-np": "--nodes and --gpus-per-node (or the stage)", "--num-proc": "--nodes and --gpus-per-node (or the stage)",
    "-H": "clusterkit (the hosts of the allocation)", "--hosts": "clusterkit (the hosts of the allocation)",
    "-hostfile": "clusterkit (the hosts of the allocation)", "--hostfile": "clusterkit (the hosts of the allocation)",
    "--host-discovery-script": "clusterkit (the hosts of the allocation)",
}


def build(ctx: Context) -> Launch:
    if not ctx.command:
        from clusterkit.job.launchers import split_python
        split_python(ctx.command, "horovod")  # raises the shared 'no command' error
    if ctx.container and ctx.multi:
        from clusterkit.errors import PlanError
        raise PlanError("horovod across nodes starts workers over SSH, outside the site's container; "
                        "use torchrun/srun, or --set container=false")
    hosts: Word = Sh('"$CK_HOSTS_SLOTS"') if ctx.slurm else f"localhost:{ctx.gpus_per_node}"
    words: tuple[Word, ...] = ("horovodrun", "-np", str(ctx.world_size), "-H", hosts)
    notes = (f"-np {ctx.world_size} = {ctx.nnodes} hosts x {ctx.gpus_per_node} slots",)
    # -H host1:G,host2:G from the allocation Slurm granted
    setup = (f"CK_HOSTS_SLOTS=$(sed 's/$/:{ctx.gpus_per_node}/' <<< \"$ck_allocation\" | paste -sd, -) ||",
             '  ck_fail 1 "cannot build horovodrun\'s host list from the allocation"',
             "export CK_HOSTS_SLOTS") if ctx.slurm else ()
    return Launch("horovod", "once", words, tuple(ctx.command), dialect=SLOTS, notes=notes, setup=setup)
