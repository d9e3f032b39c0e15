"""Watching a launch step while it runs: the supervisor's wait loop asks :meth:`Watcher.check`
between its waits; it reads the progress file (:func:`clusterkit.heartbeat.read`: bounded,
validated), or, when the job writes none, the time of the newest write to this attempt's rank
logs, and asks :func:`clusterkit.supervise.stall.verdict` (docs/architecture.md §3, "Watching a
run").  On a stall, :func:`end_step` ends the launch step, and recovery takes it as a failed
attempt (:func:`stalled_verdict`: category ``stall``, the node behind when it can be named).

Each look also reads every rank's own file (:mod:`clusterkit.supervise.ranks`) and notes when
each rank's heartbeat last changed, on the supervisor's clock.  A stall is reported once the
rank behind is named from them (:func:`clusterkit.supervise.ranks.behind`), or at most
:data:`NAME_WAIT_S` later without a name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from clusterkit import heartbeat, jobfiles, stackdump
from clusterkit.supervise import dumps, ranks, replan, spy, stall
from clusterkit.supervise.recovery import attempt_logs

HISTORY = 1000          # the progress lines kept for the median (the newest)
END_WAIT_S = 60.0       # how long an ended step's launcher gets before it is killed
NAME_WAIT_S = 20.0      # how long a found stall waits for its rank behind to be named (a frozen beat)
Log = Callable[[str], None]


class Watcher:
    """One attempt's progress as the supervisor sees it."""

    def __init__(self, limits: stall.Limits, run_dir: str, job_id: str, restart: int, attempt: int,
                 log: Log, send: dumps.Send | None = None, clock: Callable[[], float] = time.monotonic,
                 spy_mode: str | None = None) -> None:
        self.limits, self.log, self.clock = limits, log, clock
        self.path = jobfiles.PROGRESS.path(run_dir, job_id)
        self.logs = (run_dir, job_id, restart, attempt)
        self.started = clock()
        self.seen: deque[stall.Seen] = deque(maxlen=HISTORY)
        self.last = heartbeat.read(self.path)   # an earlier attempt's line: not this attempt's progress
        # where the attempt began: its rank 0's first line, marked in the progress log past here
        self.marks = Path(f"{self.path}.log")
        self.marks_from = self.looked = heartbeat.log_size(self.marks)
        self.first: int | None = None
        self.said_logs = False
        self.found: stall.Stall | None = None
        self.pending: tuple[stall.Stall, float] | None = None   # a stall found, its rank behind not yet named
        self.beats: dict[int, tuple[float, float, ranks.RankLine]] = {}   # rank: (beat, first seen, line)
        self.first_beats = {x.rank: x.beat for x in ranks.read_all(self.path.parent, job_id)}
        self.behind: ranks.Behind | None = None
        self.said_naming = False
        self.dumps = None if send is None else dumps.Dumps(self.path.parent, job_id, send, clock)
        self.stacks: list[stackdump.Dump] | None = None
        self.dump_behind: ranks.Behind | None = None
        # py-spy's dumps and the flight recorder's, asked with the stack dumps (mode: step or here)
        self.spy = None if spy_mode is None else spy.Spy(self.path.parent, job_id, restart, spy_mode, clock)
        self.spied: list[stackdump.Dump] | None = None
        self.spy_behind: ranks.Behind | None = None

    @property
    def poll_s(self) -> float:
        """How long the supervisor's wait lasts between two looks: a fifth of the floor, 1 to 30 s."""
        return min(30.0, max(1.0, self.limits.floor_s / 5))

    def _look(self) -> bool:
        """Note a new progress line of this attempt; whether the job writes a progress file."""
        size, looked = heartbeat.log_size(self.marks), self.looked
        self.looked = size
        line = heartbeat.read(self.path)
        if line is None:
            return self.path.exists()
        if line != self.last:
            self.last = line
            if self.seen and line.step < self.seen[-1].step:
                self.seen.clear()   # the step count went back (a resume): count again from here,
                self.marks_from, self.first = looked, None   # and from its process's first mark
            self.seen.append(stall.Seen(line.step, line.phase, self.clock()))
        if self.first is None and self.seen:
            self.first = heartbeat.first_mark(self.marks, self.marks_from, self.seen[0].step)
        return True

    def _logs_at(self) -> float | None:
        """The newest write to this attempt's rank logs, on the supervisor's clock."""
        newest = 0.0
        for name in attempt_logs(*self.logs)[:1000]:
            try:
                newest = max(newest, os.stat(name).st_mtime)
            except OSError:
                continue
        return None if not newest else self.clock() - max(0.0, time.time() - newest)

    def _look_ranks(self) -> None:
        """Note each rank's heartbeat that changed (a file of an earlier attempt never counts)."""
        now = self.clock()
        for line in ranks.read_all(self.path.parent, self.logs[1]):
            if self.first_beats.get(line.rank) == line.beat:
                continue
            had = self.beats.get(line.rank)
            if had is None or had[0] != line.beat:
                self.beats[line.rank] = (line.beat, now, line)

    def _named(self, found: stall.Stall) -> stall.Stall | None:
        """The stall once its rank behind is named (from the heartbeats, else the stack dumps)
        and the ranks' stack dumps are in, or ``NAME_WAIT_S`` after it was found (at once when no
        rank of this attempt writes a file of its own: then none writes a stack file either)."""
        self._look_ranks()
        if self.pending is None:
            self.pending = (found, self.clock())
            if self.dumps is not None and self.dumps.ask(set(self.beats)):
                self.log(f"watch: {found.worded()}: asking the ranks for their stack dumps "
                         f"({dumps.send_signal_name()})" + (f": {self.dumps.error}" if self.dumps.error else ""))
            if self.spy is not None and self.spy.ask(set(self.beats)):
                self.log(f"watch: asking py-spy (where installed) and the flight recorder for the ranks' stacks, "
                         f"at most {spy.SPY_WAIT_S:.0f} s")
        self.behind = ranks.behind([(line, at) for _, at, line in self.beats.values()], self.clock())
        dumping = self.dumps is not None and bool(self.dumps.sizes) and not self.dumps.done()
        spying = self.spy is not None and self.spy.proc is not None and not self.spy.done()
        if self.spy is not None and self.spy.out is not None and not spying:
            self._read_spy()
        if self.dumps is not None and self.dumps.sizes and not dumping and self.stacks is None:
            self._read_dumps()
        # by the dumps: a rank silent to the signal outweighs all but a heartbeat that stood still, and
        # ranks outside any collective while the others wait in one outweigh a lower step
        told = self.dump_behind
        if told is not None and (self.behind is None or told.frozen > self.behind.frozen
                                 or (not self.behind.frozen and told.why.startswith("outside any collective"))):
            self.behind = told
        if self.behind is None and self.spy_behind is not None:
            self.behind = self.spy_behind
        if self.behind is None and self.beats and not self.said_naming:
            self.said_naming = True
            self.log(f"watch: {found.worded()}: looking for the rank behind in the ranks' progress files "
                     f"(at most {NAME_WAIT_S:.0f} s)")
        # py-spy is waited for while nothing else has named the rank behind (a node cut off never answers it)
        if self.clock() - self.pending[1] < NAME_WAIT_S and (dumping or (self.behind is None
                                                                        and (bool(self.beats) or spying))):
            return None
        if spying and self.spy is not None:
            self.spy.stop()
            self._read_spy()
            self.behind = self.behind or self.spy_behind
        if self.behind is not None and len(self.behind.ranks) == 1:
            mine = [d for d in self.stacks or [] if d.rank == self.behind.ranks[0] and d.frames]
            if mine:
                self.behind = replace(self.behind, why=f"{self.behind.why}; its stack: {mine[0].top}")
            seen = [d for d in self.spied or [] if d.rank == self.behind.ranks[0] and d.frames]
            if seen and self.behind is not self.spy_behind:
                self.behind = replace(self.behind, why=f"{self.behind.why}; py-spy: {seen[0].top}")
        self.found = self.pending[0]
        return self.found

    def _read_dumps(self) -> None:
        """Log the ranks' dumps; the ranks behind by them (silent, or apart from the others)."""
        assert self.dumps is not None
        got = self.stacks = self.dumps.read()
        self.log(f"watch: stack dumps: {stackdump.summary(got)}")
        late = stackdump.behind(got)
        if late:
            why = ("no stack dump came while the others' did" if not late[0].frames else
                   "outside any collective while the others wait in one, by the stack dumps"
                   if any(d.collective for d in got) else "apart from where the others are, by the stack dumps")
            self.dump_behind = ranks.Behind(tuple(d.rank for d in late), tuple(sorted({d.host for d in late})), why,
                                            frozen=not late[0].frames)

    def _read_spy(self) -> None:
        """Log what the nodes said and py-spy's dumps; the ranks behind by them."""
        assert self.spy is not None
        for line in self.spy.lines():
            self.log(f"watch: py-spy: {line}")
        got = self.spied = self.spy.read()
        if got:
            self.log(f"watch: py-spy dumps: {stackdump.summary(got)}")
        late = stackdump.behind(got)
        if late and late[0].frames:
            why = ("outside any collective while the others wait in one, by py-spy" if any(d.collective for d in got)
                   else "apart from where the others are, by py-spy")
            self.spy_behind = ranks.Behind(tuple(d.rank for d in late), tuple(sorted({d.host for d in late})),
                                           f"{why}: {late[0].top}")

    def check(self) -> stall.Stall | None:
        """A stall of this attempt, found now (once), or None."""
        if self.found is not None:
            return None
        if self.pending is not None:
            return self._named(self.pending[0])
        self._look_ranks()
        reporting = self._look()
        logs_at = None
        if not reporting:
            if not self.said_logs and self.clock() - self.started > self.limits.floor_s:
                self.log(f"watch: no progress file ({self.path.name}) yet after {self.limits.floor_s:.0f} s: until "
                         "there is one, the newest write to the rank logs stands in (clusterkit.progress(step))")
                self.said_logs = True
            logs_at = self._logs_at()
        found = stall.verdict(list(self.seen), self.clock(), self.limits, reporting=reporting,
                              started=self.started, logs_at=logs_at, first=self.first)
        return None if found is None else self._named(found)

    @property
    def poll(self) -> float:
        """The wait before the next look: short while a found stall waits for its rank behind."""
        return min(self.poll_s, 2.0) if self.pending is not None else self.poll_s


def stalled_verdict(found: stall.Stall, behind: ranks.Behind | None = None) -> replan.Verdict:
    """The failed attempt's verdict for recovery: ``stall``, with the node behind where known
    (one node: recovery drops it; ranks behind on several nodes are named, none dropped)."""
    if behind is None:
        said = "; node behind: unknown (the ranks' progress files name none)"
    else:
        where = "node behind" if behind.node else "ranks behind on several nodes"
        said = f"; {where}: {behind.worded()}"
    rank = behind.ranks[0] if behind is not None and len(behind.ranks) == 1 else None
    return replan.Verdict("stall", found.worded() + said, behind.node if behind else None, rank)


def end_step(proc: subprocess.Popen[bytes], log: Log) -> int:
    """End a stalled launch: TERM to the launcher (srun ends its step's every task), KILL after
    ``END_WAIT_S``; the launcher's status as a shell reports it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=END_WAIT_S)
    except subprocess.TimeoutExpired:
        log(f"watch: the launcher is still running {END_WAIT_S:.0f} s after TERM: KILL")
        proc.kill()
        proc.wait()
    rc = proc.returncode
    return 128 - rc if rc < 0 else rc
