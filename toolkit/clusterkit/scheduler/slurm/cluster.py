"""What a submission asks Slurm's controller about the cluster before it queues a job: the
partitions and their nodes, the nodes' states, ``MaxArraySize`` (``scontrol``, parsed by
:mod:`clusterkit.scheduler.slurm.admin_text`).  Each query is given its command runner; the
decisions and their words are the caller's (:mod:`clusterkit.actions`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from clusterkit import hostlist, slurmclient
from clusterkit.scheduler.slurm import admin_text as st

#: The scontrol calls that describe the cluster (``sites init``/``drift`` read the same).
COMMANDS: dict[str, tuple[str, ...]] = {
    "config": ("scontrol", "show", "config"),
    "partitions": ("scontrol", "show", "partition", "-o"),
    "nodes": ("scontrol", "show", "node", "-o"),
    "topology": ("scontrol", "show", "topology"),
}

#: A command's output, or :class:`~clusterkit.errors.SlurmUnreachable` (``slurmclient.require``).
SlurmCommand = Callable[[Sequence[str]], str]


def partitions_and_nodes(run: SlurmCommand) -> tuple[st.Partitions, dict[str, st.Node]]:
    """The cluster's partitions and its nodes by name (two ``scontrol -o`` calls)."""
    return st.parse_partitions(run(COMMANDS["partitions"])), st.parse_nodes(run(COMMANDS["nodes"])).by_name()


def node_states(hosts: Iterable[str], run: slurmclient.Run) -> dict[str, st.Node] | None:
    """What Slurm says of ``hosts`` (one ``scontrol show node``), by name; None where it does not answer."""
    answer = run(("scontrol", "show", "node", "-o", hostlist.fold(list(hosts))), 15)
    return st.parse_nodes(answer.stdout).by_name() if answer.returncode == 0 else None


def max_array_size(run: slurmclient.Run) -> int | None:
    """Slurm's ``MaxArraySize`` (``scontrol show config``); None where it does not answer or say."""
    answer = run(["scontrol", "show", "config"], 30)
    if answer.returncode != 0:
        return None
    value = st.parse_config(answer.stdout).values.get("MaxArraySize", "")
    return int(value) if value.isdigit() else None


def partition(name: str, run: slurmclient.Run) -> st.Partition | None:
    """The partition ``name`` as Slurm lists it; None where it does not answer or list it."""
    answer = run(list(COMMANDS["partitions"]), 30)
    return st.parse_partitions(answer.stdout).get(name) if answer.returncode == 0 else None
