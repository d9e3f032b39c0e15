"""Watching one attempt for a straggler to replace (``--straggler-replace RATIO``): the supervisor's
wait loop asks :meth:`Replacer.check` between its waits; it reads the ranks' own files
(:func:`clusterkit.supervise.ranks.read_all`) and, once a straggler stays one, the progress log's
marks (:func:`clusterkit.heartbeat.read_log`), and asks :mod:`clusterkit.supervise.straggle`.  On
a verdict the supervisor ends the launch step (:func:`clusterkit.supervise.watch.end_step`) and
recovery takes it as a failed attempt (docs/architecture.md §3, "Watching a run").

A rank's file of an earlier attempt never counts: a look waits until every rank wrote in this one
(its beat changed since the attempt began).  A progress log at its cap (about 6000 marks) gets no
new mark, so no save is seen and no straggler is replaced.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from clusterkit import heartbeat, jobfiles
from clusterkit.supervise import ranks, recovery, replan, straggle

Log = Callable[[str], None]
HISTORY = 1000
#: the wait between two looks (the ranks rewrite their files every heartbeat.BEAT_S): a save is
#: seen at most this long after it ended, so little training past the checkpoint is lost
POLL_S = heartbeat.BEAT_S


class Replacer:
    """One attempt's looks for a straggler, and the checkpoint it is replaced at."""

    def __init__(self, ratio: float, run_dir: str, job_id: str, run: recovery.Run, restarts_left: int,
                 log: Log) -> None:
        self.ratio, self.run, self.restarts_left, self.log = ratio, run, restarts_left, log
        self.logs, self.job_id = jobfiles.logs(run_dir), job_id
        self.first_beats = {x.rank: x.beat for x in ranks.read_all(self.logs, job_id)}
        self.looks: deque[straggle.Look] = deque(maxlen=HISTORY)
        self.since: int | None = None   # the progress log's length once the straggler stayed one
        self.node: str | None = None    # that straggler's node
        self.kept: str | None = None    # the node named and kept (recovery could not go on without it)

    def _marks(self) -> list[heartbeat.Progress]:
        return heartbeat.read_log(self.logs / jobfiles.PROGRESS_LOG.name(self.job_id))

    def _facts(self) -> replan.Attempted:
        """What recovery would know, less what it asks Slurm when it acts (the nodes down, the job's
        nodes asked for by name, its partition): those it checks then."""
        run = self.run
        return replan.Attempted(attempt=run.attempt, nodes=run.nodes, unused=run.unused,
                                max_relaunches=run.max_relaunches, unknown_used=run.unknown_used,
                                restarts_left=self.restarts_left, allocation=run.allocation,
                                excluded=tuple(h for a in run.done for h, _ in a.dropped))

    def check(self) -> replan.Verdict | None:
        """The verdict that ends this attempt for its straggler, found now (once), or None."""
        lines = ranks.read_all(self.logs, self.job_id)
        if len(lines) < 2 or any(self.first_beats.get(x.rank) == x.beat for x in lines):
            return None
        found = straggle.one_node(ranks.stragglers(lines, self.ratio), self.run.nodes)
        self.looks.append(straggle.Look(max(x.step for x in lines), found))
        stays = straggle.persistent(self.looks)
        if stays is None or stays.host == self.kept:
            if self.since is not None:
                self.log(f"straggler: {self.node} is no longer one: not replaced")
                self.since = self.node = None
            return None
        if self.since is None:
            why = straggle.kept_because(straggle.verdict(stays, self.looks[-1].step), self._facts())
            if why is not None:
                self.kept = stays.host
                self.log(f"straggler: {stays.worded()} stays one, but is kept: replacing it would end the run "
                         f"({why})")
                return None
            self.since, self.node = len(self._marks()), stays.host
            self.log(f"straggler: {stays.worded()} stays one over {straggle.PERSIST_STEPS} steps: it is replaced "
                     "at the next checkpoint save")
            return None
        saved = straggle.finished_save(self._marks(), self.since)
        if saved is None:
            return None
        self.log(straggle.worded(stays, saved))
        self.since = self.node = None
        return straggle.verdict(stays, saved)


def replacer_of(ratio: float, run_dir: str, job_id: str, run: recovery.Run | None, restarts_left: int,
                log: Log) -> Replacer | None:
    """The attempt's replacer: none when replacing is off (``ratio`` 0) or recovery is (no ``run``)."""
    return Replacer(ratio, run_dir, job_id, run, restarts_left, log) if ratio > 0 and run is not None else None


def ended_why(v: replan.Verdict) -> str:
    """Why the supervisor ended the attempt itself, as its recovery line says it."""
    return "its straggler is replaced (no doctor run)" if v.category == straggle.CATEGORY else \
        "it stalled (no doctor run)"


def poll_s(replacer: Replacer | None) -> float:
    """The longest wait before the replacer's next look (none: no bound of its own)."""
    return POLL_S if replacer is not None else float("inf")
