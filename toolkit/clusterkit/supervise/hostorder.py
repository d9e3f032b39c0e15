"""The job's hosts ordered by switch or block, on the batch host when the job starts (the site's
``network.topology``; docs/architecture.md §3, "Placement by topology").

``python -m clusterkit.supervise.hostorder HOST,HOST,...`` asks ``scontrol show topology`` (inside
the job, through :func:`clusterkit.slurmclient.run`), reads it with :mod:`clusterkit.topology`
and prints the hosts one a line, the nodes of one leaf switch (or block) together, the first
host first.  Exit 0 with the hosts; 1 when Slurm gave no topology to order by (a line on stderr
says why; the job keeps its order); 2 for hosts that are not a host list.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from clusterkit import slurmclient, topology
from clusterkit.hostlist import HostlistError, check_host

TIMEOUT_S = 30.0


def groups(client: slurmclient.Run = slurmclient.run) -> tuple[dict[str, str], str | None]:
    """Each node's leaf switch or block as Slurm reports it now, and why there is none (or None).
    (A ``SLURM_TOPO_LEN`` in the environment cuts scontrol's lines: a cut line groups no node.)"""
    answer = client(["scontrol", "show", "topology"], TIMEOUT_S)
    if answer.returncode != 0:
        why = (answer.stderr or "").strip().splitlines()[-1:] or [f"exit {answer.returncode}"]
        return {}, f"scontrol show topology failed: {why[0][:200]}"
    topo = topology.parse(answer.stdout)
    if not topo.groups:
        return {}, "scontrol show topology lists no switch or block (is TopologyPlugin topology/tree or /block?)"
    return topo.group_of(), None


def main(argv: Sequence[str], client: slurmclient.Run = slurmclient.run) -> int:
    if len(argv) != 1:
        print("usage: python -m clusterkit.supervise.hostorder HOST,HOST,...", file=sys.stderr)
        return 2
    try:
        hosts = [check_host(h) for h in argv[0].split(",") if h]
    except HostlistError as exc:
        print(f"clusterkit: hosts to order: {exc}", file=sys.stderr)
        return 2
    if not hosts:
        print("clusterkit: no hosts to order", file=sys.stderr)
        return 2
    os.environ.pop("SLURM_TOPO_LEN", None)   # this process's own: scontrol would cut every line at it
    group_of, why = groups(client)
    if why is not None:
        print(f"clusterkit: hosts not ordered by switch: {why}", file=sys.stderr)
        return 1
    ordered = topology.order_hosts(hosts, group_of)
    print(f"clusterkit: hosts ordered by switch or block ({topology.describe(ordered, group_of)})", file=sys.stderr)
    print("\n".join(ordered))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
