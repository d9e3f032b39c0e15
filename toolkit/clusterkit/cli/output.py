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


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def warn(message: str) -> None:
    # click drops the colour when stderr is not a terminal; the message itself is never markup
    click.echo(click.style("clusterkit: warning:", fg="yellow") + " " + printable_lines(message), err=True)


def info(message: str) -> None:
    click.echo(printable_lines(message), err=True)


def line(message: str) -> None:
    """One plain line on stdout (no markup, no wrapping, no escape sequences)."""
    click.echo(printable_lines(message))


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    from rich.table import Table

    t = Table(title=title, show_lines=False, header_style="bold")
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*("" if v is None else printable(str(v)) for v in r))
    return t


def print_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    out().print(table(title, columns, rows))
