"""A site's own launcher, declared as data (site key ``launchers:``, config/launcher_keys.py).

Its argv is the site's words with each ``{ck:NAME}`` replaced by clusterkit: the job's counts
(``nnodes``, ``nproc_per_node``, ``world_size``) here, as plain text; the rendezvous host and
port, the hostfile and the node's own values where the launcher starts (the launch body's shell
expansions of ``placeholders``).  Nothing of the site's text is evaluated by a shell.  Where it
starts (``per``) is one of the built-in modes: once per node through srun (``per_node``), once per
GPU as srun tasks (``per_gpu``: each task's RANK, LOCAL_RANK and WORLD_SIZE from Slurm, as
``--launcher srun``), or once on the batch host (``once``).
"""

from __future__ import annotations

from collections.abc import Callable

from clusterkit.config.launcher_keys import PLACEHOLDER, DeclaredLauncher
from clusterkit.errors import PlanError
from clusterkit.job.launchers import BARE, SLOTS, Context, Launch, Mode, split_python

MODES: dict[str, Mode] = {"node": "per_node", "task": "per_gpu", "job": "once"}


def _counts(ctx: Context) -> dict[str, str]:
    return {"nnodes": str(ctx.nnodes), "nproc_per_node": str(ctx.gpus_per_node), "world_size": str(ctx.world_size)}


def _word(word: str, counts: dict[str, str]) -> str:
    """The counts written in; every other ``{ck:NAME}`` left for the launch body."""
    return PLACEHOLDER.sub(lambda m: counts.get(m.group(1), m.group(0)), word)


def builder(name: str, decl: DeclaredLauncher) -> Callable[[Context], Launch]:
    """The ``build`` of the site's launcher ``name``."""

    def build(ctx: Context) -> Launch:
        mode = MODES[decl.per]
        if mode == "per_gpu" and not ctx.slurm:
            raise PlanError(f"the site's launcher {name} (per: task) starts each rank as an srun task: "
                            "it needs a Slurm site")
        if mode == "once" and ctx.container and ctx.multi:
            raise PlanError(f"the site's launcher {name} (per: job) starts the other nodes' workers itself, "
                            "outside the site's container: --set container=false, or declare it per: node")
        command = tuple(ctx.command)
        if decl.command == "script":
            py = split_python(ctx.command, name)
            if not py.is_python:
                raise PlanError(f"the site's launcher {name} runs a python script (command: script): "
                                "use -- python train.py ...", field="command", value=repr(ctx.command[0][:60]))
            if py.module and not decl.module_flag:
                raise PlanError(f"the site's launcher {name} has no flag for python -m (its module_flag)",
                                field="command", value=repr(" ".join(ctx.command[:3])[:80]))
            command = py.args
            prefix = (decl.module_flag,) if py.module and decl.module_flag else ()
        else:
            split_python(ctx.command, name)   # a command is required
            prefix = ()
        counts = _counts(ctx)
        words = tuple(_word(w, counts) for w in decl.argv) + prefix
        dialect = {"slots": SLOTS, "bare": BARE}.get(decl.hostfile)
        note = (f"the site's launcher {name} (launchers.{name}): {decl.per} "
                f"x {ctx.nnodes} nodes, {ctx.gpus_per_node} GPUs each")
        return Launch(name, mode, words, command, dialect=dialect, notes=(note,),
                      label=f"the site's launcher {name}")

    return build
