"""Human and JSON renderings of command results.  Computes nothing.

Plain lines, notes and warnings go through click (colour only on a terminal; the text is never
markup).  Tables and progress bars go through rich, imported only for them, which turns colour
and progress off by itself when stdout is not a terminal; emoji codes stay text (node output
may say ``:-1:``).  Text from outside (Slurm, nodes, logs, records) reaches these lines, so
each goes through :func:`clusterkit.tooltext.printable_lines` (tables: :func:`~clusterkit.tooltext.printable`):
no escape sequence reaches the terminal.  ``--json`` output is one JSON document on stdout.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import click

from clusterkit.tooltext import printable, printable_lines

if TYPE_CHECKING:  # rich costs ~40 ms to import: plain lines and JSON do not need it
    from rich.console import Console
    from rich.table import Table

_out: Console | None = None
_err: Console | None = None


def out() -> Console:
    global _out
    if _out is None:
        from rich.console import Console

        # In a pipe rich would wrap tables at 80 columns; plain wide lines read and grep better.
        _out = Console(highlight=False, emoji=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
    return _out


def err() -> Console:
    global _err
    if _err is None:
        from rich.console import Console

        _err = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)
    return _err


#: The version of the shape of every command's ``--json`` output; raised when a key changes
#: meaning or goes away (a new key does not raise it).  2: ``status --json`` without JOB prints
#: the latest job's document (the table of recent jobs, ``{"jobs": [...]}``, is ``status --all --json``).
SCHEMA_VERSION = 2


def versioned(data: Any) -> Any:
    """``schema_version`` in the document: a key of an object, or of each object of a list."""
    if isinstance(data, dict):
        return {"schema_version": SCHEMA_VERSION, **data}
    if isinstance(data, list):
        return [versioned(item) if isinstance(item, dict) else item for item in data]
    return data


def emit_json(data: Any) -> None:
    """The document, indented on a terminal and on one line otherwise: Python indents JSON with
    its pure-Python encoder, about ten times slower than the C one (measured: 18 against 2 ms for
    a 64-node preflight report, 230 KB; both grow with the nodes)."""
    indent = 2 if sys.stdout.isatty() else None
    doc = versioned(data)
    try:
        text = json.dumps(doc, indent=indent, sort_keys=True, default=str, allow_nan=False)
    except ValueError:  # NaN or an infinity (a figure from outside, an unbounded estimate): JSON has none
        text = json.dumps(finite(doc), indent=indent, sort_keys=True, default=str, allow_nan=False)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def finite(data: Any) -> Any:
    """``data`` with every NaN or infinite float as ``null``, what a JSON reader can take."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(v) for v in data]
    return data


def warn(message: str) -> None:
    # click drops the colour when stderr is not a terminal; the message itself is never markup
    click.echo(click.style("clusterkit: warning:", fg="yellow") + " " + printable_lines(message), err=True)


def info(message: str) -> None:
    click.echo(printable_lines(message), err=True)


def line(message: str) -> None:
    """One plain line on stdout (no markup, no wrapping, no escape sequences)."""
    click.echo(printable_lines(message))


FOLDED_MIN = 8  # the narrowest a folded (non-key) column is made, unless a word in it is wider


def is_terminal() -> bool:
    return out().is_terminal


def _widest_word(cells: Iterable[str]) -> int:
    return max((len(word) for cell in cells for word in cell.split()), default=0)


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
          keys: Sequence[str] = (), right: Sequence[str] = ()) -> Table:
    """A rich table for a terminal: no heavy box, the ``keys`` columns never wrapped or cut
    (at least as wide as their widest cell), the others wrapped at spaces to fit the terminal's
    width, never narrower than their widest word: no word is ever split."""
    from rich import box
    from rich.table import Table

    cells = [["" if v is None else printable(str(v)) for v in r] for r in rows]
    t = Table(title=title, show_lines=False, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
              show_edge=False, padding=(0, 1, 0, 0))  # columns two apart: the padding and the box's blank
    for i, c in enumerate(columns):
        widest = max([len(c), *(len(line) for r in cells for line in r[i].splitlines() or [""])])
        if c in right:  # rich does not justify a column that never wraps: aligned here
            for r in cells:
                r[i] = r[i].rjust(widest)
        if c in keys:
            t.add_column(c, no_wrap=True, min_width=widest, overflow="ignore")
        else:  # wrapped at spaces, never narrower than its widest word (nor FOLDED_MIN, where wider)
            least = max(len(c), _widest_word(r[i] for r in cells), min(widest, FOLDED_MIN))
            t.add_column(c, overflow="fold", min_width=least)
    for r in cells:
        t.add_row(*r)
    return t


def plain_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], right: Sequence[str] = ()) -> list[str]:
    """Plain aligned columns, two spaces apart, nothing cut or wrapped: what a pipe gets (``cut``,
    ``awk`` and ``grep`` read it; a cell's newlines become "; ")."""
    cells = [[printable(("" if v is None else str(v)).replace("\n", "; ")) for v in r] for r in rows]
    all_rows = [list(columns), *cells]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(columns))]
    lines = []
    for r in all_rows:
        parts = [v.rjust(widths[i]) if columns[i] in right else v.ljust(widths[i]) for i, v in enumerate(r)]
        lines.append("  ".join(parts).rstrip())
    return lines


def _layout_width(shown: Table, width: int) -> int | None:
    """The width to lay ``shown`` out at so that it fits ``width`` with every column at least at
    its least (keys whole, no word split), or None where it cannot.  The least: the columns'
    widths two apart (the padding and the box's blank); rich may still lay a table out a column
    wider than asked, so the layout is tried, uncropped, at ``width`` and one less."""
    import io

    from rich.console import Console

    if sum(max(c.min_width or 0, 1) for c in shown.columns) + 2 * (len(shown.columns) - 1) > width:
        return None
    for target in (width, width - 1):
        text = io.StringIO()
        Console(file=text, width=target, color_system=None, highlight=False, emoji=False).print(shown, crop=False)
        if max(map(len, text.getvalue().splitlines()), default=0) <= width:
            return target
    return None


def print_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
                keys: Sequence[str] = (), right: Sequence[str] = (), drop: Sequence[str] = ()) -> None:
    """A table on stdout.  On a terminal: rich, key columns whole, the rest wrapped at spaces to
    its width; where even that does not fit, the ``drop`` columns are left out, in that order,
    as few as needed (a last line names them); failing that, plain columns.  In a pipe: plain
    aligned columns, every column, nothing cut or wrapped."""
    rows = list(rows)
    console = out()
    if console.is_terminal:
        cols, kept = list(columns), [list(r) for r in rows]
        left_out: list[str] = []
        for name in [None, *(d for d in drop if d in columns)]:
            if name is not None:
                i = cols.index(name)
                cols.pop(i)
                kept = [r[:i] + r[i + 1:] for r in kept]
                left_out.append(name)
            shown = table(title, cols, kept, keys, right)
            target = _layout_width(shown, console.width)
            if target is not None:
                console.print(shown, width=target, soft_wrap=False, crop=False)  # as probed
                if left_out:
                    click.echo(f"(left out: {', '.join(left_out)}; --json has them)")
                return
    if title:  # every column, plain: the terminal wraps the long lines, nothing is cut
        click.echo(printable_lines(title))
    for text in plain_table(columns, rows, right):
        click.echo(text)
