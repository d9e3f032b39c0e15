"""``clusterkit doctor JOB | --logs PATH...``: the root cause of a failed job.

Exit codes: 0 the job succeeded (``ok``); 1 a failure was diagnosed (``unknown`` included);
2 usage; 3 the logs or Slurm could not be read.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from clusterkit.tooltext import printable

if TYPE_CHECKING:
    from clusterkit.preflight.choose import NodeVerdict

DOCTOR_EXIT_HELP = """\b
Exit codes:
  0  the job succeeded (verdict ok)
  1  a failure was diagnosed (including unknown)
  2  usage error
  3  logs or Slurm could not be read, or the login node of a job submitted
     through one could not be reached
"""


@contextmanager
def _progress(total: int) -> Iterator[Any]:
    """A byte progress bar on a TTY (stderr); nothing in a pipe."""
    if not sys.stderr.isatty() or total < (64 << 20):
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    from clusterkit.cli import output

    with Progress("reading logs", BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  console=output.err(), transient=True) as bar:
        task = bar.add_task("logs", total=total)
        yield lambda n: bar.advance(task, n)


def _print(report: dict[str, Any]) -> None:
    from clusterkit.cli import output
    from clusterkit.tooltext import printable

    con = output.out()

    def say(text: str) -> None:  # the lines quote the job's logs and Slurm: no escape sequence gets through
        con.print(printable(text), markup=False, highlight=False)

    if report.get("array"):
        from clusterkit.diagnose.arrays import group_lines

        for line in group_lines(report):
            say(line)
    for i, r in enumerate(report["restarts"]):
        v = r["verdict"]
        head = f"restart {r['restart']}: " if len(report["restarts"]) > 1 else ""
        say(f"{head}{v['category']}: {v['summary']}")
        where = [f"{k} {v[k]}" for k in ("node", "rank", "time") if v[k] is not None]
        if where:
            say("  " + ", ".join(where))
        for e in v["evidence"]:
            say(f"  evidence: {e}")
        for c in r["cascade"]:
            ranks = c["ranks"]
            shown = ",".join(map(str, ranks[:16])) + ("..." if len(ranks) > 16 else "")
            say(f"  cascade: {c['category']} x{c['count']}" + (f" (ranks {shown})" if ranks else ""))
        if i == 0:
            for a in v["advice"]:
                say(f"  advice: {a}")
    fr = report.get("flight_recorder") or {}
    for f in fr.get("findings", []):
        head = f"restart {f['restart']}: " if len(report["restarts"]) > 1 else ""
        say(f"  {head}flight recorder: {f['summary']}")
    if fr.get("dumps"):
        say(f"  flight recorder: {fr['dumps']} dump(s) read" + ("" if fr.get("findings") else ", every rank in step"))
    for e in fr.get("unreadable", []):
        say(f"  flight recorder: could not read {e}")
    for key, name in (("stack_dumps", "stack dumps"), ("py_spy", "py-spy dumps")):
        stacks = report.get(key)
        if not stacks:
            continue
        when = time.strftime(" at %H:%M:%S", time.localtime(stacks["asked"])) if stacks.get("asked") else ""
        say(f"  {name} (asked{when}, on a stall): {stacks['summary']}")
        for d in stacks["behind"]:
            by = " by py-spy" if key == "py_spy" else ""
            say(f"  stack of rank {d['rank']} on {d['node']}{by}, innermost first: " + (" < ".join(
                os.path.basename(f) for f in d["frames"][:4]) or "none (stopped, or not answering)"))
    files = report["files"]
    say(f"read {files['read']} file(s), {files['bytes']} bytes"
        + (f"; {len(files['cut'])} cut at {files['max_bytes_per_file'] >> 20} MiB" if files["cut"] else "")
        + (f"; {files['copies_left_out']} torchrun per-rank copies left out (their node's log holds the "
           "same lines)" if files.get("copies_left_out") else ""))


def _dropped(ref: str) -> list[NodeVerdict]:
    """The nodes job ``ref``'s in-job preflight dropped (none when there is no such job record)."""
    from clusterkit.api import Job

    return Job.find(ref).dropped_nodes()


@click.command(epilog=DOCTOR_EXIT_HELP)
@click.argument("targets", nargs=-1, metavar="[JOB] | PATH...")
@click.option("--logs", "from_logs", is_flag=True,
              help="Diagnose log files or directories (any job, a kernel log) instead of a submitted JOB.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--category", "category_only", is_flag=True,
              help="Print only the verdict's category (one word, e.g. user-code), for scripts: a chained job "
                   "asks it whether a restart can fix its failure.")
def doctor(targets: tuple[str, ...], from_logs: bool, as_json: bool, category_only: bool) -> int:
    """Find why a job died: the root cause, its node and rank, and what to do now.

    JOB is a job id as `submit` printed it, or SITE:JOB_ID (without it, the job you submitted
    last): doctor reads its run directory's logs and, for a Slurm job, asks Slurm for its
    state.  With --logs, PATH... are files or directories.
    Cascade symptoms (watchdog timeouts, connection resets, killed peers) are counted under
    the verdict, never reported as its cause.
    """
    from clusterkit.cli.login import forward_job

    if not from_logs and (fwd := forward_job("doctor", targets)) is not None:
        return fwd
    from clusterkit.api import diagnose_logs, doctor_job
    from clusterkit.cli import output
    from clusterkit.diagnose import LogsUnreadable
    from clusterkit.errors import InputError

    if as_json and category_only:
        raise InputError("give --json or --category, not both")
    if from_logs:
        found = diagnose_logs([Path(t) for t in targets], _progress)
    else:
        if len(targets) > 1:
            raise InputError("give one JOB (or none: the job you submitted last), or --logs PATH...")
        if targets:
            ref = targets[0]
        else:  # the job submitted last, said on stderr as `status` and `logs` say it
            from clusterkit.cli.jobs import latest_job

            ref = latest_job().key
        found = doctor_job(ref, _progress)
    for note in found.notes:
        output.warn(note)
    report = found.report
    dropped = [] if from_logs or category_only else _dropped(ref)
    if category_only:
        click.echo(report["verdict"]["category"])
    elif as_json:
        output.emit_json({**report, "dropped": [asdict(v) for v in dropped]} if not from_logs else report)
    else:
        _print(report)
        for v in dropped:   # the in-job preflight's choice, from the run directory (validated)
            output.line(printable(f"  dropped before launch: {v.worded()}"
                                  + (" [" + ", ".join(f"{k} {x:g}" for k, x in sorted(v.figures.items())) + "]"
                                     if v.figures else "")))
    for e in report["files"]["unreadable"]:
        output.warn(f"could not read {e}")
    for path in report["files"]["cut"]:
        output.warn(f"{path}: read only its first {report['files']['max_bytes_per_file'] >> 20} MiB; "
                    "the verdict does not cover the rest")
    if report.get("slurm_error"):
        raise LogsUnreadable(f"{report['slurm_error']} (diagnosed from the logs alone)")
    return 0 if report["verdict"]["category"] == "ok" else 1
