"""Each rank's own progress file (``<job>.progress.rank<R>``, written by
:func:`clusterkit.heartbeat.progress`): read, and judged.  Which rank is behind when the run
stalls (:func:`behind`, for the supervisor), and which ranks are persistently slower than the
others (:func:`stragglers`, for ``status``).  docs/architecture.md §3, "Watching a run".

The files are text a job wrote: each is read as a regular file (no link, FIFO or device), its
first :data:`MAX_BYTES` bytes, strictly the format; at most :data:`MAX_RANKS` of them.
The judgments are pure: lines and times in, a verdict out.
"""

from __future__ import annotations

import math
import os
import re
import stat
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from clusterkit import jobfiles

MAX_BYTES = 512
MAX_RANKS = 4096
#: A rank's heartbeat that stood this long while another rank's moved: that rank is frozen
#: (2.5 beats of :data:`clusterkit.heartbeat.BEAT_S`: one late write is not a freeze).
FROZEN_S = 12.5
#: Rank files whose beat is this much older than the newest one are an earlier attempt's.
STALE_S = 60.0
_NUM = r"\d{1,12}(?:\.\d{1,9})?"
_LINE = re.compile(rf"step=(\d{{1,16}}) time=({_NUM}) phase=(train|save) rank=(\d{{1,7}}) "
                   rf"host=([A-Za-z0-9._-]{{1,64}}) step_s=({_NUM}|-) work_s=({_NUM}|-) beat=({_NUM})"
                   r"(?: in=([A-Za-z0-9._:<>-]{1,80}) coll=([01]))?")
_NAME = jobfiles.rank_files()


@dataclass(frozen=True)
class RankLine:
    """One rank's newest line."""

    step: int
    time: float
    phase: str
    rank: int
    host: str
    step_s: float | None    # median wall seconds per step over its last steps
    work_s: float | None    # median seconds of its own work per step (what the script passed)
    beat: float             # when its heartbeat thread last wrote (the rank's clock)
    where: str = "-"        # the training thread's innermost frame then (file:function; "-": unknown)
    coll: bool | None = None   # a torch.distributed frame on its stack then (waiting in a collective)


def read_line(path: str | os.PathLike[str]) -> RankLine | None:
    """The line at ``path``, or None (not a regular file, not the format)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    m = _LINE.fullmatch(data.decode("ascii", errors="replace").strip())
    if m is None:
        return None
    times = [float(m.group(i)) for i in (2, 8)]
    opt = [None if m.group(i) == "-" else float(m.group(i)) for i in (6, 7)]
    if not all(math.isfinite(t) for t in times) or any(v is not None and not math.isfinite(v) for v in opt):
        return None
    coll = None if m.group(10) is None else m.group(10) == "1"
    return RankLine(int(m.group(1)), times[0], m.group(3), int(m.group(4)), m.group(5), opt[0], opt[1], times[1],
                    m.group(9) or "-", coll)


def read_all(logs: Path, job_id: str) -> list[RankLine]:
    """The job's rank files in ``logs`` (at most ``MAX_RANKS``), by rank; a file whose name and
    line disagree on the rank is left out, as are files of an earlier attempt (:data:`STALE_S`)."""
    try:
        names = sorted(os.listdir(logs))
    except OSError:
        return []
    lines: list[RankLine] = []
    for name in names:
        m = _NAME.match(name)
        if m is None or m.group("job") != job_id:
            continue
        got = read_line(logs / name)
        if got is not None and got.rank == int(m.group("rank")):
            lines.append(got)
        if len(lines) >= MAX_RANKS:
            break
    if not lines:
        return []
    newest = max(x.beat for x in lines)
    return sorted((x for x in lines if newest - x.beat <= STALE_S), key=lambda x: x.rank)


@dataclass(frozen=True)
class Behind:
    """The rank(s) behind a stall and their node."""

    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    why: str
    frozen: bool = False    # named by a heartbeat that stood still (the strongest sign)

    @property
    def node(self) -> str | None:
        """The one node behind (recovery drops it); None when the ranks behind span nodes."""
        return self.hosts[0] if len(self.hosts) == 1 else None

    def worded(self) -> str:
        who = ("rank " if len(self.ranks) == 1 else "ranks ") + ",".join(map(str, self.ranks[:8]))
        return f"{', '.join(self.hosts[:8])} ({who}: {self.why})"


def _of(lines: Iterable[RankLine], why: str, frozen: bool = False) -> Behind:
    picked = sorted(lines, key=lambda x: x.rank)
    return Behind(tuple(x.rank for x in picked), tuple(sorted({x.host for x in picked})), why, frozen)


def behind(seen: Sequence[tuple[RankLine, float]], now: float) -> Behind | None:
    """Which ranks are behind a stall.  ``seen``: each rank's newest line with the time (the
    supervisor's clock) its beat was last seen to change.  First the frozen: ranks whose beat
    stood still longer than :data:`FROZEN_S` while another's moved within it; else those whose
    training thread is outside any collective while the others wait in one; else the ranks whose
    step is lower than every other rank's; else those apart from where most ranks are
    (:func:`_where`); else None."""
    if len(seen) < 2:
        return None
    frozen = [line for line, at in seen if now - at > FROZEN_S]
    if frozen and len(frozen) < len(seen):
        quiet = max(now - at for _, at in seen if now - at > FROZEN_S)
        return _of(frozen, f"its heartbeat stopped {quiet:.0f} s ago while the other ranks' went on", True)
    # A rank inside a collective waits for the others: ranks outside any collective while the rest
    # wait in one are behind, whatever the steps say (a step is reported around the collectives, so
    # ranks that wait may show the step before the one the rank behind reported)
    if (out := _outside([line for line, _ in seen])) is not None:
        return out
    steps = {line.step for line, _ in seen}
    if len(steps) > 1:
        low = min(steps)
        late = [line for line, _ in seen if line.step == low]
        return _of(late, f"at step {low}, the others at {max(steps)}")
    return _where([line for line, _ in seen])


def _outside(lines: Sequence[RankLine]) -> Behind | None:
    """Those outside any collective while every other rank waits in one."""
    if any(x.coll is None for x in lines):
        return None
    out = [x for x in lines if not x.coll]
    if out and len(out) < len(lines):
        spots = sorted({x.where for x in out})
        return _of(out, f"outside any collective (in {', '.join(spots[:3])}) while the others wait in one")
    return None


def _where(lines: Sequence[RankLine]) -> Behind | None:
    """From where the ranks' training threads are: those apart from where more than half of the
    ranks are (a minority of them); none when it cannot be told."""
    if any(x.coll is None for x in lines):
        return None
    counts = Counter(x.where for x in lines if x.where != "-")
    if not counts:
        return None
    spot, n = counts.most_common(1)[0]
    apart = [x for x in lines if x.where != spot]
    if n * 2 > len(lines) and apart and spot != "-":
        spots = sorted({x.where for x in apart})
        return _of(apart, f"in {', '.join(spots[:3])} while the others are in {spot}")
    return None


@dataclass(frozen=True)
class Straggler:
    rank: int
    host: str
    seconds: float      # its median (work, else wall) seconds per step
    others_s: float     # the median of the other ranks' medians
    measure: str        # work | step

    @property
    def ratio(self) -> float:
        return self.seconds / self.others_s

    def worded(self) -> str:
        return (f"{self.host} (rank {self.rank}: {self.seconds:.3f} s of {self.measure} per step, "
                f"{self.ratio:.1f}x the others' {self.others_s:.3f} s)")

    def to_dict(self) -> dict[str, object]:
        return {"node": self.host, "rank": self.rank, "seconds": round(self.seconds, 6),
                "others_s": round(self.others_s, 6), "ratio": round(self.ratio, 3), "measure": self.measure}


def stragglers(lines: Sequence[RankLine], ratio: float) -> list[Straggler]:
    """Ranks slower than ``ratio`` x the median of the other ranks, by their own median over
    their last steps (so persistently: more than half of those steps were slow).  The work time
    where every rank reports one, else the wall step time.  ``ratio`` 0: none judged."""
    if ratio <= 0 or len(lines) < 2:
        return []
    measure = "work" if all(x.work_s is not None for x in lines) else "step"
    values = [(x, x.work_s if measure == "work" else x.step_s) for x in lines]
    if any(v is None for _, v in values):
        return []
    out = []
    for i, (line, v) in enumerate(values):
        others = statistics.median(w for j, (_, w) in enumerate(values) if j != i)  # type: ignore[type-var]
        if others is not None and others > 0 and v is not None and v > ratio * others:
            out.append(Straggler(line.rank, line.host, v, others, measure))
    return out
