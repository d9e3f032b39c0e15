"""Per-process logs at scale: which nodes write ``--debug``'s NCCL INFO files, and where a
launcher keeps its per-rank log files (docs/jobs.md, "Logs at thousands of ranks"; the site keys:
:mod:`clusterkit.config.log_keys`).

``--debug`` sets ``NCCL_DEBUG=INFO`` and an ``NCCL_DEBUG_FILE`` per process in the run's logs.  At
2,048 nodes of 8 GPUs that is 16,384 files created at once in one directory of the shared file
system.  Above the site's ``logs.debug_max_nodes`` each process writes its file on its node's own
disk (``logs.node_local_dir``), and after a failed attempt the supervisor copies back the files of
the node its verdict names (:mod:`clusterkit.supervise.frback`).  A job may instead name the nodes
to debug (``--debug-nodes NODESET``, at most that many): each node's launch body then keeps INFO
and its file in the run's logs only where its Slurm node name is one of them, and sets
``NCCL_DEBUG=WARN`` (no file: warnings go to the rank's output) everywhere else.  Pure.
"""

from __future__ import annotations

from clusterkit import jobfiles
from clusterkit.config.schema import Site
from clusterkit.errors import PlanError
from clusterkit.job.templating import shell_quote

FIELD = "debug_nodes"


def check(site: Site, nnodes: int, debug: bool, nodes: tuple[str, ...], per_node: bool) -> None:
    """Refuse a ``--debug-nodes`` that names nodes the site lacks, more than the limit, or that the
    launcher cannot honour (one that starts every rank itself from the batch host: ``per_node`` False)."""
    limit = site.logs.debug_max_nodes
    if not nodes:   # above the limit every node writes its NCCL files on its own disk (nccl.local_file)
        return
    known = set(site.nodes.hosts)
    unknown = [h for h in nodes if h not in known]
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise PlanError(f"{shown}: not in {site.name}'s nodelist {site.nodes.nodelist}", field=FIELD)
    if len(nodes) > limit:
        raise PlanError(f"names {len(nodes)} nodes, more than the site's logs.debug_max_nodes ({limit})",
                        field=FIELD, sep=" ")
    if not per_node and nnodes > 1:
        raise PlanError("this launcher starts every node's ranks itself from the batch host, so a node cannot "
                        "keep debug logging for itself: use --debug on fewer nodes, or a launcher started on "
                        "each node (torchrun, srun, accelerate)", field=FIELD)


def node_filter(nodes: tuple[str, ...]) -> str:
    """The launch body's words (each node, for itself) that turn NCCL debug logging back to WARN,
    without a file, unless the node is one of ``nodes``; empty without ``--debug-nodes``."""
    if not nodes:
        return ""
    names = "|".join(shell_quote(h) for h in nodes)
    return (f'case "${{SLURMD_NODENAME:-$(hostname -s)}}" in {names}) ;; '
            "*) export NCCL_DEBUG=WARN; unset NCCL_DEBUG_FILE NCCL_DEBUG_SUBSYS;; esac; ")


def rank_logs(site: Site, run_dir: str, nnodes: int) -> str:
    """Where torchrun keeps each rank's log files (``--log-dir``), one folder per job and restart:
    ``<run>/logs/torchrun-<job>.r<restart>/<node>`` up to the site's ``logs.debug_max_nodes``, else
    ``<logs.node_local_dir>/clusterkit-<job>.r<restart>`` on each node's own disk.  ``{ck:NAME}``
    values (:mod:`clusterkit.job.launchers.placeholders`): each node expands them for itself."""
    tail = f"{{ck:job_id}}{jobfiles.RESTART}{{ck:restart}}"
    if nnodes > site.logs.debug_max_nodes:
        return f"{site.logs.node_local_dir.rstrip('/')}/clusterkit-{tail}"
    return f"{run_dir.rstrip('/') or '.'}/{jobfiles.LOGS}/torchrun-{tail}/{{ck:node_name}}"
