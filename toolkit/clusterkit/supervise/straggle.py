"""Replacing a straggler at a checkpoint (the site's ``watch.straggler_replace``, or ``--set
straggler_replace=true``): facts in, a verdict out.  Pure: no process, no clock, no environment
(docs/architecture.md §3, "Watching a run"; docs/jobs.md, "When the run stops making progress").

The facts are what the supervisor saw of one attempt (:mod:`clusterkit.supervise.straggle_watch`
gathers them): at each look, the stragglers :func:`clusterkit.supervise.ranks.stragglers` names
from the ranks' own files, and the progress log's marks (:func:`clusterkit.heartbeat.read_log`).
The rule:

- a straggler *stays* one when every look over the last :data:`PERSIST_STEPS` steps of progress
  named the same one node (each look already judges a rank by its median over its last 20
  steps, so a few slow steps never make one); stragglers on several nodes at once name none;
- it is replaced at the checkpoint save that finishes after that (the newest, where looks
  were far apart) (a ``phase=save`` mark
  followed by a ``phase=train`` mark): the launch step is ended and recovery takes the attempt as
  failed with the verdict ``straggler`` and its node (:data:`clusterkit.supervise.replan.RELAUNCH`),
  so the node is dropped, a spare taken if there is one, and training resumes from that checkpoint;
- where recovery would stop the run instead (no spare, and no relaunch or restart left to go on
  without the node), the straggler is named and kept: a slow run beats an ended one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from clusterkit.heartbeat import Progress
from clusterkit.supervise import replan
from clusterkit.supervise.ranks import Straggler

#: the steps of progress over which every look must name the same node
PERSIST_STEPS = 10
CATEGORY = "straggler"


@dataclass(frozen=True)
class Look:
    """One look at the ranks' files: the newest step they reported, and the straggler named."""

    step: int
    straggler: Straggler | None   # the slowest rank of the one node named; None: none, or several nodes

    @property
    def node(self) -> str | None:
        return None if self.straggler is None else self.straggler.host


def one_node(found: Sequence[Straggler], nodes: Sequence[str]) -> Straggler | None:
    """The straggler to replace from one look's: the slowest, when all are on one node of the
    attempt's ``nodes``; None when there is none, or they span nodes (no one node to drop)."""
    hosts = {s.host for s in found}
    if len(hosts) != 1 or not hosts <= set(nodes):
        return None
    return max(found, key=lambda s: s.ratio)


def persistent(looks: Sequence[Look], steps: int = PERSIST_STEPS) -> Straggler | None:
    """The newest look's straggler when every look back over at least ``steps`` steps of
    progress named its node (the looks oldest first, one attempt's); else None."""
    if not looks or looks[-1].straggler is None:
        return None
    node, first = looks[-1].node, len(looks) - 1
    while first > 0 and looks[first - 1].node == node:
        first -= 1
    return looks[-1].straggler if looks[-1].step - looks[first].step >= steps else None


def finished_save(marks: Sequence[Progress], since: int) -> int | None:
    """The step of the newest checkpoint save whose end is mark ``since`` or later (a save mark,
    then a train mark at that step or after it: the checkpoint training resumes from); None while
    none has ended."""
    for i in range(len(marks) - 1, max(1, since) - 1, -1):
        before, mark = marks[i - 1], marks[i]
        if before.phase == "save" and mark.phase == "train" and mark.step >= before.step:
            return before.step
    return None


def verdict(s: Straggler, step: int, steps: int = PERSIST_STEPS) -> replan.Verdict:
    """The ended attempt's verdict for recovery: ``straggler``, its node and rank."""
    return replan.Verdict(CATEGORY, f"{s.worded()}, a straggler over {steps} steps: replaced at the checkpoint "
                          f"at step {step}", s.host, s.rank)


def worded(s: Straggler, step: int) -> str:
    """The job log's line when the launch step is ended for it."""
    return (f"straggler: {s.host} (rank {s.rank}, {s.ratio:.1f}x the others' {s.measure} time per step) is "
            f"replaced at the checkpoint at step {step}: ending the launch step")


def kept_because(v: replan.Verdict, a: replan.Attempted) -> str | None:
    """Why a straggler is kept rather than replaced (recovery would stop the run: no spare and no
    way on without it), or None when recovery would go on without it (:func:`replan.next_step`)."""
    step = replan.next_step(v, [], a)
    return step.reason if isinstance(step, replan.Stop) else None
