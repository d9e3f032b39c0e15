"""What a scheduler is able to answer or do, asked by what the code needs, not by its kind's name
(:class:`Traits`): each scheduler package states its own (``slurm.traits``, ``local.traits``), and
:func:`clusterkit.scheduler.traits` returns the one for a kind.  Outside ``clusterkit.scheduler`` no
module compares a kind to a name: it asks these.  Pure."""

from __future__ import annotations

from dataclasses import dataclass

from clusterkit.vocab import SchedulerKind


@dataclass(frozen=True)
class Traits:
    kind: SchedulerKind
    #: where a job went, in words: "Submitted job 12 to <label>"
    label: str
    #: how diagnosis evidence names the scheduler's view of a job (never "slurm" for another kind)
    who: str
    #: the job runs on an allocation of nodes the scheduler grants (its own nodes, which in-job preflight
    #: may drop, attempts inside it, a node history, an exclude list); False: on this machine
    allocates: bool
    #: a controller keeps the queue and the nodes' states, and can be asked (a pending job's place and
    #: start estimate, which nodes are drained or down, the cluster's configuration)
    queued: bool
    #: an accounting database (sacct) keeps each job's allocations, steps and run tag
    accounted: bool
    #: the scheduler can hold a job until another ends (``--after``, ``--chain``)
    holds: bool
    #: it runs an array's tasks as jobs of their own (``JOB_INDEX``); False: one after another in the job
    runs_arrays: bool
    #: ``submit`` waits for the job's end unless told not to (the job runs under clusterkit itself)
    submit_waits: bool
