"""How many spare nodes a job asks for beyond the ones it launches on.

Spares are allocated with the job; its own preflight (in the allocation) launches on the best
``nodes`` of them, and the supervisor relaunches on a spare when a node fails mid-run
(docs/jobs.md "When a node dies mid-run").  At the large-cluster stage a node fails every few
hours of a big run (the Llama 3 report: 1.97e-5 failures per GPU-hour), so spares are the
default there: 3 % of the nodes, at least one, as a share of a few percent is what large runs
hold in reserve (ByteDance's warm standbys; bench/goodput_sim.py shows 3 per 100 keeps within
0.3 points of never running out).  Smaller stages keep none: a spare there is a large share
of the job.  A site sets its own with ``stages.<stage>.spares`` (a count or ``N%``); ``--spares``
or ``--set spares=`` wins over both.

A default never fails a plan: where the site or partition has fewer nodes left, the job asks
for what there is and says so.  Spares given on the command line are checked as given.
"""

from __future__ import annotations

from clusterkit.config.schema import Site
from clusterkit.errors import PlanError
from clusterkit.vocab import spares_for

#: the stages that allocate spares unless told otherwise, and how many
STAGE_DEFAULT: dict[str, int | str] = {"large-cluster": "3%"}


def choose(site: Site, stage: str, given: int | None, staged: int | str | None, nnodes: int, in_job: bool,
           exclude: tuple[str, ...], allocates: bool) -> tuple[int, str | None]:
    """(spares, a warning for the plan or None).  ``given``: ``--spares``/``--set spares=``;
    ``staged``: the site's ``stages.<stage>.spares``; a site whose scheduler grants no nodes
    (``allocates``) has no default."""
    if given is not None or not allocates:
        if given and not in_job:
            raise PlanError("spare nodes are chosen by the job's own preflight, which is off: "
                            "add --set preflight_in_job=true (or perf)", field="settings.spares", value=str(given))
        return given or 0, None
    value = staged if staged is not None else STAGE_DEFAULT.get(stage, 0)
    wanted = spares_for(value, nnodes)
    where = f"site stages.{stage}.spares" if staged is not None else f"the {stage} default"
    if not wanted:
        return 0, None
    if not in_job:
        return 0, (f"no spare nodes ({where} is {value}): the job's own preflight, which picks them, is off "
                   "(--set preflight_in_job=true turns it on)")
    left = len([h for h in site.nodes.hosts if h not in set(exclude)]) - nnodes
    if left < wanted:
        got = max(left, 0)
        return got, (f"{got} spare node(s), not the {wanted} of {where} ({value}): the site has no more nodes "
                     "beside the job's")
    return wanted, None
