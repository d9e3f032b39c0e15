"""``clusterkit status JOB --run --html FILE``: a run's account as one self-contained page (pure:
text out; docs/jobs.md, "What a run cost").

No script, font, image or style sheet from elsewhere: HTML with its style inline and the run's
timeline an inline SVG.  One row per job of the run: its allocations as bars (green: ended well or
running; orange: ended otherwise), each checkpoint a blue tick, each failure a red mark (its title:
the time, what failed, doctor's verdict, the nodes dropped, the time lost).  Below, the time by
cause, ETTR and a table of the failures.  Every text from Slurm, records or the job is escaped;
at most :data:`MAX_ROWS` jobs and :data:`MAX_MARKS` checkpoints per job are drawn.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from html import escape

from clusterkit.scheduler.runaccount import Account, Allocation
from clusterkit.scheduler.runcauses import Causes, Failure

MAX_ROWS = 200
MAX_MARKS = 500
FAILURE_COLOUR = "#d62728"
CHECKPOINT_COLOUR = "#1f77b4"
GOOD_COLOUR = "#2ca02c"
ENDED_COLOUR = "#ff7f0e"
_WIDTH, _ROW, _LABEL, _PAD = 900, 30, 110, 10

_STYLE = """
body { font: 14px/1.4 sans-serif; margin: 24px; color: #222; }
table { border-collapse: collapse; margin-top: 12px; }
th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #ddd; }
td.num { text-align: right; }
.ettr { font-size: 20px; font-weight: bold; }
"""


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _dur(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _failure_text(f: Failure) -> str:
    text = f"job {f.job_id} restart {f.restart}, {_when(f.time)}: {f.what}"
    if f.verdict:
        text += f"; doctor: {f.verdict}"
    elif f.not_judged:
        text += f"; not judged: {f.not_judged}"
    if f.dropped:
        text += f"; dropped {', '.join(f.dropped)}"
    return text + f"; lost {_dur(f.lost_s)}"


def _verdict(f: Failure) -> str:
    return f.verdict or (f"not judged: {f.not_judged}" if f.not_judged else "-")


def _timeline(jobs: Sequence[str], allocs: Sequence[Allocation], causes: Causes, now: float) -> str:
    times = [t for a in allocs for t in (a.submit, a.start, a.end) if t is not None]
    times += [f.time for f in causes.failures]
    t0, t1 = min(times, default=now), max([*times, now] if any(a.end is None and a.start for a in allocs) else times,
                                         default=now)
    span = max(t1 - t0, 1.0)
    inner = _WIDTH - _LABEL - 2 * _PAD

    def x(t: float) -> float:
        return _LABEL + _PAD + inner * min(max((t - t0) / span, 0.0), 1.0)

    parts = []
    for row, job in enumerate(jobs[:MAX_ROWS]):
        y = _PAD + row * _ROW
        parts.append(f'<text x="4" y="{y + 19}" font-size="13">job {escape(job)}</text>')
        for a in (a for a in allocs if a.job_id == job and a.start is not None):
            start = a.start or t0
            end = a.end if a.end is not None else now
            colour = GOOD_COLOUR if a.state in ("COMPLETED", "RUNNING") else ENDED_COLOUR
            parts.append(f'<rect x="{x(start):.1f}" y="{y + 6}" width="{max(x(end) - x(start), 2):.1f}" height="16" '
                         f'fill="{colour}"><title>{escape(f"job {job}: {a.state}, {_when(start)} to {_when(a.end)}")}'
                         "</title></rect>")
        for _, t in [c for c in causes.checkpoints if c[0] == job][-MAX_MARKS:]:
            parts.append(f'<rect x="{x(t) - 1:.1f}" y="{y + 2}" width="3" height="24" fill="{CHECKPOINT_COLOUR}">'
                         f"<title>checkpoint {escape(_when(t))}</title></rect>")
        for f in (f for f in causes.failures if f.job_id == job):
            parts.append(f'<circle cx="{x(f.time):.1f}" cy="{y + 14}" r="8" fill="{FAILURE_COLOUR}">'
                         f"<title>{escape(_failure_text(f))}</title></circle>")
    height = 2 * _PAD + _ROW * max(1, min(len(jobs), MAX_ROWS))
    return (f'<svg width="{_WIDTH}" height="{height}" viewBox="0 0 {_WIDTH} {height}" role="img" '
            f'aria-label="the run\'s timeline">{"".join(parts)}</svg>')


def page(account: Account, allocs: Sequence[Allocation], causes: Causes, warnings: Sequence[str],
         now: float | None = None) -> str:
    now = time.time() if now is None else now
    a, c = account, causes
    ettr = "-" if c.ettr is None else f"{100 * c.ettr:.1f} %"
    by_cause = [("waiting in the queue", a.waiting_s), ("start-up", c.startup_s), ("training kept", c.kept_s),
                ("training lost since the last checkpoint", c.lost_s), ("recovery", c.recovery_s),
                ("no progress reported", c.unreported_s)]
    rows = "".join(f'<tr><td>{escape(k)}</td><td class="num">{_dur(v)}</td></tr>' for k, v in by_cause)
    failures = "".join(
        f'<tr class="failure"><td>{escape(f.job_id)}</td><td>{f.restart}</td><td>{escape(_when(f.time))}</td>'
        f"<td>{escape(f.what)}</td><td>{escape(_verdict(f))}</td><td>{escape(', '.join(f.dropped) or '-')}</td>"
        f'<td>{escape(_when(f.checkpoint))}</td><td class="num">{_dur(f.lost_s)}</td></tr>'
        for f in c.failures[:MAX_MARKS])
    gpu_h = "unknown" if a.gpu_hours is None else f"{a.gpu_hours:.4g}"
    notes = "".join(f"<li>{escape(w)}</li>" for w in warnings)
    title = escape(f"Run {a.run_name}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{_STYLE}</style></head>
<body>
<h1>{title}</h1>
<p>{len(a.jobs)} job(s), {a.allocation_count} allocation(s){" (still running)" if a.open else ""};
wall time {_dur(a.wall_s)}; allocated {_dur(c.allocated_s)}, {gpu_h} GPU-hours.</p>
<p class="ettr">ETTR (training kept / allocated): {ettr}</p>
{_timeline(a.jobs, allocs, c, now)}
<p>Green: an allocation that ended well (or runs); orange: one that ended otherwise; blue: a checkpoint;
red: a failure (hover for its verdict).</p>
<h2>Time by cause</h2>
<table>{rows}</table>
<h2>Failures ({len(c.failures)})</h2>
<table><tr><th>job</th><th>restart</th><th>time</th><th>what</th><th>doctor's verdict</th><th>nodes dropped</th>
<th>last checkpoint</th><th>lost</th></tr>{failures}</table>
{f"<h2>Notes</h2><ul>{notes}</ul>" if notes else ""}
<p>Generated by clusterkit at {escape(_when(now))}.</p>
</body></html>
"""
