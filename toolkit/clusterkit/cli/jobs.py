"""``clusterkit status [JOB|--all]``, ``logs [JOB] [--follow]``, ``cancel JOB...``: the life of a submitted job.

JOB is a job id as printed by ``submit`` (the newest record with that id), or ``SITE:JOB_ID``;
``status`` and ``logs`` without one show the job submitted last; ``status --all`` the table.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from clusterkit import jobfiles
from clusterkit.cli.waiting import describe
from clusterkit.tooltext import printable

if TYPE_CHECKING:
    from clusterkit.api import Job
    from clusterkit.errors import RecordError
    from clusterkit.scheduler.base import JobStatus
    from clusterkit.scheduler.logs import LogTail
    from clusterkit.scheduler.records import JobRecord, RecordStore


def _store() -> RecordStore:
    from clusterkit.scheduler.records import RecordStore

    return RecordStore()


def _find(ref: str) -> Job:
    from clusterkit.api import Job

    return Job.find(ref)


def _find_or_latest(ref: str | None, store: RecordStore | None = None) -> Job:
    """The job named, or without a name the job submitted last (said on stderr)."""
    from clusterkit.api import Job

    if ref:
        return Job.find(ref, store=store)
    return latest_job(store)


def latest_job(store: RecordStore | None = None) -> Job:
    """The job submitted last, said on stderr: what ``status``, ``logs`` and ``doctor`` without
    JOB act on."""
    from clusterkit.api import Job
    from clusterkit.cli import output

    skipped: list[RecordError] = []
    try:
        job = Job.latest(store=store, skipped=skipped)
    finally:
        for err in skipped:   # a newer record that cannot be read: said, then passed over
            output.warn(f"skipping unreadable record: {err}")
    output.info(f"clusterkit: job {job.key}, the latest you submitted")
    return job


def _print_tails(tails: list[LogTail]) -> None:
    from clusterkit.cli import output

    for t in tails:
        if not t["tail"]:
            continue
        output.line(f"==> {t['path']} (last {len(t['tail'])} lines) <==")
        for line in t["tail"]:
            output.line(line)


def _figures(figures: dict[str, float]) -> str:
    return " [" + ", ".join(f"{k} {v:g}" for k, v in sorted(figures.items())) + "]" if figures else ""


def _warn_cache_failures(failures: list[str]) -> None:
    from clusterkit.cli import output

    if failures:
        output.warn(f"could not cache final job states ({len(failures)} record(s)): {failures[0]}")


def _warn_status_problems(unreachable: str | None, failures: list[str]) -> int:
    """One warning line per kind of problem; the exit code for an unanswered controller."""
    from clusterkit.cli import output
    from clusterkit.errors import ExitCode

    _warn_cache_failures(failures)
    if unreachable is None:
        return 0
    output.warn(f"{unreachable}; Slurm jobs show their last known state, marked stale")
    return int(ExitCode.UNREACHABLE)


def _final_json(rec: JobRecord, st: JobStatus, tails: list[LogTail]) -> dict[str, object]:
    from clusterkit.scheduler.arrays import task_rows
    from clusterkit.scheduler.status import summarize

    return {**summarize(rec, st), **({"task_list": task_rows(st)} if st.tasks else {}), "logs": tails}


def follow_to_end(job: Job, as_json: bool) -> int:
    """Wait for the job's end, print its final state and log tails; return its exit status."""
    from clusterkit.cli import output
    from clusterkit.cli.waiting import watching

    with watching(job, quiet=as_json) as watch:
        result = job.wait(on_poll=watch)
    _warn_cache_failures(result.cache_failures)
    if as_json:
        output.emit_json(_final_json(job.record, result.status, result.tails))
    else:
        _print_tails(result.tails)
        output.line(_final_line(job, result.state, result.exit_code, result.signal))
        _cause(job, result.exit_status)
    return result.exit_status


def _cause(job: Job, exit_status: int) -> None:
    """A failed job's cause in one line, and the doctor command (:mod:`clusterkit.cli.ending`)."""
    if exit_status:
        from clusterkit.cli import output
        from clusterkit.cli.ending import cause_lines

        for line in cause_lines(job):
            output.line(f"  {line}")


def _final_line(job: Job, state: object, exit_code: int | None, signal: int | None) -> str:
    return f"Job {job.id} {state}" + (f" (exit code {exit_code})" if exit_code is not None
                                      else f" (signal {signal})" if signal is not None else "")


def stream_to_end(job: Job) -> int:
    """Print the job's log lines as they are written until it ended (``submit --follow``), then
    its final state; return its exit status.  While it is queued: its state and Slurm's reason."""
    from clusterkit.cli.waiting import watching

    with watching(job) as watch:
        job.wait_started(on_poll=watch)
    _follow(job)
    result = job.wait()
    _warn_cache_failures(result.cache_failures)
    from clusterkit.cli import output

    output.line(_final_line(job, result.state, result.exit_code, result.signal))
    _cause(job, result.exit_status)
    return result.exit_status


@click.command()
@click.argument("job", required=False)
@click.option("--all", "-a", "show_all", is_flag=True,
              help="Show your recent jobs as a table (the latest first) instead of one job.")
@click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N",
              help="With the table: how many of the most recent jobs to show (default 20; implies --all).")
@click.option("--run", "run", is_flag=True,
              help="The account of the job's run (every job under its run name, with their requeues): "
                   "wall time, GPU-hours, waiting, requeues, steps, goodput.")
@click.option("--html", "html_file", metavar="FILE", default=None,
              help="With --run: also write the run's account as one self-contained page (its timeline).")
@click.option("--json", "as_json", is_flag=True,
              help='Print the result as JSON: the job\'s document; with --all, {"jobs": [...]}; '
                   'with --run, {"run": {...}}.')
def status(job: str | None, show_all: bool, limit: int | None, run: bool, html_file: str | None,
           as_json: bool) -> int:
    """Show the state of one job (with the tail of its log unless it completed), by default
    the job you submitted last; with --all, a table of your recent jobs.

    \b
    Examples:
      clusterkit status              # the job you submitted last
      clusterkit status 4242         # that job
      clusterkit status --all        # your 20 most recent jobs, the latest first
      clusterkit status --limit 50   # your 50 most recent jobs
      clusterkit status 4242 --run   # its run: GPU-hours, time by cause, ETTR
      clusterkit status lm-7b --run --html r.html   # a run by name; a page

    JOB is a job id as `submit` printed it, or SITE:JOB_ID; without it, the job you submitted
    last (the newest of your job records), as for `logs`.

    The table's jobs are refreshed with one squeue and one sacct call (scontrol when sacct is
    unavailable), not one call per job.

    When the Slurm controller does not answer, local jobs are shown as usual and Slurm jobs
    with their last known state marked stale (UNKNOWN when none is known), with a warning;
    the exit code is then 3.
    """
    from clusterkit.cli.login import forward_job

    if not html_file and (fwd := forward_job("status", [job] if job else [], latest=not show_all)) is not None:
        return fwd
    from clusterkit.cli import output
    from clusterkit.errors import InputError

    store = _store()
    if job and (show_all or limit is not None):
        raise InputError("give JOB, or --all/--limit for the table of recent jobs, not both")
    if run and (show_all or limit is not None):
        raise InputError("--run shows one job's run; it cannot be combined with --all/--limit")
    if html_file is not None and not run:
        raise InputError("--html writes a run's page; give it with --run")
    if show_all or limit is not None:
        return _status_table(store, limit or 20, as_json)
    if run:
        from clusterkit.api.account import job_of_run
        from clusterkit.cli.runaccount import show

        return show(job_of_run(job, store) or _find_or_latest(job, store), as_json, html_file)
    if not job and not store.files():
        if as_json:
            output.emit_json({"job": None, "records": str(store.root)})
        else:
            output.line(f"No jobs recorded in {store.root} yet (submit one first).")
        return 0
    from dataclasses import asdict

    found = _find_or_latest(job, store)
    seen = found.look()
    rec, st = seen.record, seen.status
    code = _warn_status_problems(seen.unreachable, seen.cache_failures)
    dropped = found.dropped_nodes()
    from clusterkit import heartbeat

    beat = heartbeat.read(jobfiles.PROGRESS.path(rec.run_dir, rec.job_id))
    place = found.queue_place() if st.state == "PENDING" and not st.stale else None
    ranks = found.stragglers()
    if as_json:
        tried = {"dropped": [asdict(v) for v in dropped], "attempts": found.attempts(), "teardown": found.teardown()}
        output.emit_json({**_final_json(rec, st, seen.tails), **tried, "progress": asdict(beat) if beat else None,
                          "ranks_reporting": ranks["reporting"], "straggler_ratio": ranks["ratio"],
                          "stragglers": [x.to_dict() for x in ranks["stragglers"]],
                          "queue": place.to_dict() if place else None})
        return code
    from clusterkit.cli.arrays import show_tasks
    from clusterkit.cli.attempts import show_attempts

    output.line(describe(rec, st))
    if place is not None:
        output.line(f"  queue: {place.worded()}")
    output.line(f"  site {rec.site}, stage {rec.stage}, {rec.launcher} on {rec.nnodes} node(s), "
                f"world size {rec.world_size}; nodes: {st.nodes or '-'}")
    for v in dropped:   # the in-job preflight's choice, the attempts' (read from the run directory, validated)
        output.line(f"  dropped: {printable(v.worded())}{_figures(v.figures)}")
    show_attempts(found)   # each failed attempt inside the allocation
    if steps := found.teardown():   # after the training, its status apart
        output.line("  teardown: " + ", ".join(f"step {t['step']} status {t['status']}" for t in steps))
    if beat is not None:
        output.line(f"  progress: {beat.worded()}")
    for x in ranks["stragglers"]:
        output.line(f"  straggler: {x.worded()}")
    output.line(f"  run directory: {rec.run_dir}")
    from clusterkit.job.code import CodeSnapshot

    if (snapshot := CodeSnapshot.from_dict(rec.plan.get("code"))) is not None:
        output.line(f"  {printable(snapshot.worded())}")
    show_tasks(rec, st)
    if st.terminal and st.state != "COMPLETED":
        # the verdict doctor cached; status itself never scans logs
        output.line(f"  doctor: {rec.diagnosis}" if rec.diagnosis
                    else f"  why it ended: clusterkit doctor {rec.key}")
    if st.state != "COMPLETED":
        _print_tails(seen.tails)
    return code


def _status_table(store: RecordStore, limit: int, as_json: bool) -> int:
    """``status --all``: the ``limit`` most recent jobs, the latest first."""
    from clusterkit.api import jobs
    from clusterkit.cli import output

    view = jobs(limit, store=store)
    for err in view.unreadable:
        output.warn(f"skipping unreadable record: {err}")
    rows = view.rows
    code = _warn_status_problems(view.unreachable, view.cache_failures)
    if as_json:
        output.emit_json({"jobs": rows, "unreadable": [str(e) for e in view.unreadable]})
        return code
    if not rows:
        output.line(f"No jobs recorded in {store.root}.")
        return code
    from clusterkit.cli import jobtable
    from clusterkit.vocab import JobState

    ended = [JobState.parse(r["state"]).is_terminal for r in rows]
    columns, cells = jobtable.table(rows, ended)
    output.print_table(None, columns, cells, keys=jobtable.KEYS,
                       right=("NODES", "EXIT", "ELAPSED", "RESTARTS"), drop=jobtable.DROP)
    return code


@click.command()
@click.argument("job", required=False)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new output until the job ends.")
@click.option("--tail", "lines", type=click.IntRange(min=0), default=0,
              help="Only the last N lines of each file (0: everything).")
@click.option("--json", "as_json", is_flag=True, help="Print the logs as JSON (not with --follow).")
@click.option("--rank", type=click.IntRange(min=0), default=None, metavar="N",
              help="Only rank N's lines: its own file, or lines whose prefix names it ([rank5]:).")
@click.option("--node", default=None, metavar="NODE", help="Only NODE's lines: its own file, or lines naming it.")
def logs(job: str | None, follow: bool, lines: int, as_json: bool, rank: int | None, node: str | None) -> int:
    """Show a job's logs: the batch log, then one file per node or rank.

    JOB is a job id as `submit` printed it, or SITE:JOB_ID; without it, the job you submitted
    last (the newest of your job records).
    """
    from clusterkit.cli.login import forward_job

    if (fwd := forward_job("logs", [job] if job else [])) is not None:
        return fwd
    from clusterkit.cli import output
    from clusterkit.errors import InputError

    if follow and as_json:
        raise InputError("--follow and --json cannot be combined")
    found = _find_or_latest(job)
    rec = found.record
    picked = rank is not None or node is not None
    if follow:
        return _follow(found, rank, node)
    if as_json:
        output.emit_json({"job": rec.key, "files": [
            {"path": str(p), "lines": text} for p, text in found.log_lines(lines, rank=rank, node=node).items()]})
        return 0
    if picked:
        for p, kept in found.log_lines(lines, rank=rank, node=node).items():
            click.echo(f"==> {p} <==\n" + "\n".join(kept))
        return 0
    shown = found.log_files()
    files: dict[Path, list[str]] = found.log_lines(lines) if lines else {p: [] for p in shown}
    if not files:
        output.info(f"clusterkit: job {rec.job_id} has no log files yet in {rec.run_dir}")
    if getattr(shown, "total", 0) > len(shown):
        output.warn(f"job {rec.job_id} has {shown.total} log files; the first {len(shown)} are shown")  # type: ignore[attr-defined]
    for p, last in files.items():
        click.echo(f"==> {printable(str(p))} <==")
        if lines:
            click.echo("\n".join(last))
        else:
            _copy(p)   # in full: as written, byte for byte, a chunk at a time
    return 0


def _copy(path: Path) -> None:
    """The file as written to stdout, up to the cap of ``copy_log`` (with a warning when cut)."""
    import sys

    from clusterkit.cli import output
    from clusterkit.scheduler.logs import LOG_MAX_BYTES, copy_log

    sys.stdout.flush()
    binary = getattr(sys.stdout, "buffer", None)
    write = binary.write if binary is not None else (lambda b: sys.stdout.write(b.decode("utf-8", "replace")))
    try:
        cut = copy_log(path, write)
    except OSError as exc:
        output.warn(f"cannot read {path}: {exc.strerror or exc}")
        return
    (binary or sys.stdout).flush()
    if cut:
        output.warn(f"{path}: larger than {LOG_MAX_BYTES // 2**20} MiB, cut there; "
                    "`clusterkit logs --tail N` shows its last lines")


def _follow(job: Job, rank: int | None = None, node: str | None = None) -> int:
    """Print log lines as they arrive (like ``tail -f`` on every file) until the job ends."""
    current: Path | None = None
    for line in job.logs(follow=True, rank=rank, node=node):
        if line.path != current:
            click.echo(f"==> {printable(str(line.path))} <==")
            current = line.path
        click.echo(line)
    return 0
