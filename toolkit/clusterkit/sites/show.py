"""The human rendering of a ``sites drift`` run (``--json`` is the other rendering)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from clusterkit.sites.admin import DriftRun
from clusterkit.sites.drift import DriftReport
from clusterkit.tooltext import printable, printable_lines


def _echo(text: str) -> None:
    """One line that may quote Slurm or a node (a drained node's Reason): never an escape sequence."""
    click.echo(printable(text))


def _value(v: Any) -> str:
    return ", ".join(str(x) for x in v) if isinstance(v, list) else str(v)


def _shown(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return path


def print_report(r: DriftReport) -> None:
    counts = f"{len(r.drift)} drift" + ("" if len(r.drift) == 1 else "s")
    _echo(f"site {r.site} ({_shown(r.file)}) vs cluster {r.cluster or '?'}: {counts}")
    for d in r.drift:
        on = f" on {d.nodes}" if d.nodes else ""
        _echo(f"  DRIFT {d.key} at {d.where}: configured {_value(d.configured)}, "
              f"live {_value(d.live)}{on} ({d.message})")
    if r.node_state:
        click.echo("  node state (not drift):")
        for s in r.node_state:
            _echo(f"    {s.nodes}: {s.state}" + (f" ({s.reason})" if s.reason else ""))
    for host, why in r.unreachable.items():
        _echo(f"  UNREACHABLE {host}: {why}")
    for note in r.notes:
        _echo(f"  note: {note}")


def print_run(run: DriftRun) -> None:
    for r in run.reports:
        print_report(r)
    for site, why in run.skipped:
        _echo(f"skipped {site}: {why}")
    for diff in run.diffs.values():
        click.echo(printable_lines(diff), nl=False)
