"""``clusterkit doctor JOB | --logs PATH...``: the root cause of a failed job.

Exit codes: 0 the job succeeded (``ok``); 1 a failure was diagnosed (``unknown`` included);
2 usage; 3 the logs or Slurm could not be read.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import click

DOCTOR_EXIT_HELP = """\b
Exit codes:
  0  the job succeeded (verdict ok)
  1  a failure was diagnosed (including unknown)
  2  usage error
  3  logs or Slurm could not be read
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


def _run(files: list[Path], view: Any, job: str | None) -> dict[str, Any]:
    from clusterkit.diagnose import diagnose_files

    total = 0
    for p in files:
        with suppress(OSError):
            total += p.stat().st_size
    with _progress(total) as tick:
        return diagnose_files(files, view, job=job, progress=tick)


def _print(report: dict[str, Any]) -> None:
    from clusterkit.cli import output

    con = output.out()
    for i, r in enumerate(report["restarts"]):
        v = r["verdict"]
        head = f"restart {r['restart']}: " if len(report["restarts"]) > 1 else ""
        con.print(f"{head}{v['category']}: {v['summary']}", markup=False, highlight=False)
        where = [f"{k} {v[k]}" for k in ("node", "rank", "time") if v[k] is not None]
        if where:
            con.print("  " + ", ".join(where), markup=False, highlight=False)
        for e in v["evidence"]:
            con.print(f"  evidence: {e}", markup=False, highlight=False)
        for c in r["cascade"]:
            ranks = c["ranks"]
            shown = ",".join(map(str, ranks[:16])) + ("..." if len(ranks) > 16 else "")
            con.print(f"  cascade: {c['category']} x{c['count']}" + (f" (ranks {shown})" if ranks else ""),
                      markup=False, highlight=False)
        if i == 0:
            for a in v["advice"]:
                con.print(f"  advice: {a}", markup=False, highlight=False)
    files = report["files"]
    con.print(f"read {files['read']} file(s), {files['bytes']} bytes", markup=False, highlight=False)


@click.command(epilog=DOCTOR_EXIT_HELP)
@click.argument("targets", nargs=-1, metavar="JOB | PATH...")
@click.option("--logs", "from_logs", is_flag=True,
              help="Diagnose log files or directories (any job, a kernel log) instead of a submitted JOB.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor(targets: tuple[str, ...], from_logs: bool, as_json: bool) -> int:
    """Find why a job died: the root cause, its node and rank, and what to do now.

    JOB is a job id as `submit` printed it, or SITE:JOB_ID: doctor reads its run directory's
    logs and asks Slurm for its state.  With --logs, PATH... are files or directories.
    Cascade symptoms (watchdog timeouts, connection resets, killed peers) are counted under
    the verdict, never reported as its cause.
    """
    from clusterkit.cli import output
    from clusterkit.diagnose import LogsUnreadable
    from clusterkit.errors import InputError

    if from_logs:
        report = _from_logs(targets)
    else:
        if len(targets) != 1:
            raise InputError("give one JOB, or --logs PATH...")
        report = _from_job(targets[0])
    if as_json:
        output.emit_json(report)
    else:
        _print(report)
    for e in report["files"]["unreadable"]:
        output.warn(f"could not read {e}")
    if report.get("slurm_error"):
        raise LogsUnreadable(f"{report['slurm_error']} (diagnosed from the logs alone)")
    return 0 if report["verdict"]["category"] == "ok" else 1


def _from_logs(targets: tuple[str, ...]) -> dict[str, Any]:
    from clusterkit.cli import output
    from clusterkit.diagnose import LogsUnreadable
    from clusterkit.diagnose.reader import expand
    from clusterkit.errors import InputError

    if not targets:
        raise InputError("--logs needs at least one PATH")
    files, missing = expand([Path(t) for t in targets])
    for m in missing:
        output.warn(m)
    if not files:
        raise LogsUnreadable(f"no log files to read in {', '.join(targets)}")
    report = _run(files, None, None)
    if report["files"]["read"] == 0:
        raise LogsUnreadable("; ".join(report["files"]["unreadable"]))
    return report


def _from_job(ref: str) -> dict[str, Any]:
    from clusterkit.cli import output
    from clusterkit.diagnose import LogsUnreadable, one_line, slurm_view
    from clusterkit.errors import InputError, RecordError, SubmitError
    from clusterkit.scheduler.jobs import log_files
    from clusterkit.scheduler.records import RecordStore
    from clusterkit.scheduler.slurm_tables import SlurmQuery
    from clusterkit.vocab import JobState

    store = RecordStore()
    try:
        rec = store.find(ref)
    except RecordError as exc:  # for doctor, exit 1 means "a failure was diagnosed": a bad JOB is usage
        raise InputError(str(exc)) from exc
    files = log_files(rec)
    view, slurm, err = None, None, None
    try:
        view, slurm = slurm_view(rec, SlurmQuery())
    except SubmitError as exc:
        err = str(exc)
    if not files and err:
        raise LogsUnreadable(f"job {rec.job_id}: no log files in {rec.run_dir}, and {err}")
    if not files:
        output.warn(f"job {rec.job_id} has no log files in {rec.run_dir}")
    report = _run(files, view, rec.key)
    report["slurm"] = slurm
    report["run_dir"] = rec.run_dir
    if err:
        report["slurm_error"] = err
    elif view is not None and JobState.parse(view.state or "").is_terminal:
        store.save(rec.model_copy(update={"diagnosis": one_line(report)}))
    return report

