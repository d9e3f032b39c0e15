"""``clusterkit nodes --html FILE``: the node history as one self-contained page (pure: text out).

No script, no font, no image or style sheet from elsewhere: the page is HTML with its style
inline and each node's timeline an inline SVG, one mark per failure on a line from the oldest
shown to now (red: hardware, grey: other; its title the time, source, verdict, job and line).
Every text from the history is escaped; the page shows at most :data:`MAX_NODES` nodes and
:data:`MAX_MARKS` marks per node (the newest), and says how many it left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from html import escape

from clusterkit.history.store import Event, parse_time
from clusterkit.history.summary import NodeSummary

MAX_NODES = 500
MAX_MARKS = 200
HARDWARE_COLOUR = "#d62728"
OTHER_COLOUR = "#8c8c8c"
_WIDTH, _HEIGHT, _PAD = 640, 28, 10

_STYLE = """
body { font: 14px/1.4 sans-serif; margin: 24px; color: #222; }
table { border-collapse: collapse; }
th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #ddd; vertical-align: middle; }
td.num { text-align: right; }
.kept { color: #fff; background: #7b1fa2; padding: 1px 6px; border-radius: 3px; }
code { font-size: 12px; background: #f4f4f4; padding: 2px 4px; }
"""


def _timeline(events: Sequence[Event], start: datetime, end: datetime) -> str:
    span = max((end - start).total_seconds(), 1.0)
    marks = []
    for e in events[-MAX_MARKS:]:
        x = _PAD + (_WIDTH - 2 * _PAD) * min(max((parse_time(e.at) - start).total_seconds() / span, 0.0), 1.0)
        title = f"{e.at} {e.source} {e.what}" + (f" job {e.job}" if e.job else "")
        title += f": {e.detail}" if e.detail else ""
        colour = HARDWARE_COLOUR if e.hardware else OTHER_COLOUR
        marks.append(f'<circle cx="{x:.1f}" cy="{_HEIGHT // 2}" r="7" fill="{colour}">'
                     f"<title>{escape(title)}</title></circle>")
    line = f'<line x1="{_PAD}" y1="{_HEIGHT // 2}" x2="{_WIDTH - _PAD}" y2="{_HEIGHT // 2}" stroke="#bbb"/>'
    return (f'<svg width="{_WIDTH}" height="{_HEIGHT}" viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img">'
            f"{line}{''.join(marks)}</svg>")


def page(site: str, summaries: Sequence[NodeSummary], events: Sequence[Event], *, window_days: float,
         exclude_after: int, now: datetime | None = None) -> str:
    """The page for ``site``: a row per node (``summaries``' order), with its own ``events``."""
    now = now or datetime.now(timezone.utc)
    by_node: dict[str, list[Event]] = {}
    for e in sorted(events, key=lambda e: e.at):
        by_node.setdefault(e.node, []).append(e)
    shown = list(summaries)[:MAX_NODES]
    times = [parse_time(e.at) for s in shown for e in by_node.get(s.node, [])[-MAX_MARKS:]]
    start = min(times, default=now)
    rows = []
    for s in shown:
        evs = by_node.get(s.node, [])
        verdicts = ", ".join(f"{w} x{c}" if c > 1 else w for w, c in s.verdicts)
        state = '<span class="kept">kept out</span>' if s.kept_out else "allowed" if s.allowed else ""
        drain = f"<br><code>{escape(s.drain_command(window_days))}</code>" if s.kept_out else ""
        rows.append(f'<tr id="node-{escape(s.node)}"><td><b>{escape(s.node)}</b></td>'
                    f'<td class="num">{s.failures}</td><td class="num">{s.recent_hardware}</td>'
                    f"<td>{escape(s.last_at)}</td><td>{escape(verdicts)}</td>"
                    f"<td>{escape(', '.join(s.jobs))}</td><td>{state}{drain}</td>"
                    f"<td>{_timeline(evs, start, now)}</td></tr>")
    left = len(summaries) - len(shown)
    more = f"<p>{left} more node(s) left out of this page; clusterkit nodes --json lists every one.</p>" if left else ""
    rule = (f"A node with {exclude_after} or more hardware failures in {window_days:g} day(s) is kept out of new jobs."
            if exclude_after else "No node is kept out of new jobs (node_history.exclude_after is 0).")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>clusterkit nodes: {escape(site)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>Nodes that failed on {escape(site)}</h1>"
            f"<p>{escape(rule)} Timeline: {escape(start.strftime('%Y-%m-%d %H:%M'))} to "
            f"{escape(now.strftime('%Y-%m-%d %H:%M'))} UTC; red marks are hardware failures, grey marks others "
            "(hover for the verdict).</p>"
            "<table><thead><tr><th>node</th><th>failed</th><th>hardware in window</th><th>last seen (UTC)</th>"
            "<th>verdicts</th><th>jobs</th><th>new jobs</th><th>timeline</th></tr></thead><tbody>"
            + "".join(rows) + f"</tbody></table>{more}</body></html>\n")
