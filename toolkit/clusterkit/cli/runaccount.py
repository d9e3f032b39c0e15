"""``clusterkit status JOB --run``: the account of JOB's run, a table of its allocations then the
totals (docs/jobs.md, "What a run cost"); ``--json`` the same as one document."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from clusterkit.cli import output
from clusterkit.tooltext import printable

if TYPE_CHECKING:
    from clusterkit.api import Job
    from clusterkit.api.account import RunAccount


def duration(seconds: float) -> str:
    """[D-]H:MM:SS, as Slurm prints elapsed time."""
    s = max(0, round(seconds))
    days, s = divmod(s, 86400)
    text = f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


def hours(h: float) -> str:
    return f"{h:.2f}" if h >= 1 else f"{h:.4f}"


def _when(t: float | None) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime(t)) if t is not None else "-"


def show(job: Job, as_json: bool, html_file: str | None = None) -> int:
    from clusterkit.api.account import run_account

    found = run_account(job)
    for w in found.warnings:
        output.warn(w)
    if html_file is not None:
        from clusterkit.cli.nodes import write_html

        write_html(html_file, found.html())
    if as_json:
        output.emit_json({"run": found.as_json()})
        return 0
    _print(found)
    return 0


def _print(found: RunAccount) -> None:
    a = found.account
    rows = [[al.job_id, al.state, _when(al.submit), _when(al.start), _when(al.end), duration(al.elapsed_s),
             "?" if al.gpus is None else al.gpus, al.source] for al in found.allocations]
    output.print_table(printable(f"Run {a.run_name}: {len(a.jobs)} job(s), {a.allocation_count} allocation(s)"
                                 + (" (still running)" if a.open else "")),
                       ["JOB", "STATE", "SUBMIT", "START", "END", "ELAPSED", "GPUS", "FROM"], rows,
                       keys=("JOB", "STATE", "ELAPSED"), right=("ELAPSED", "GPUS"), drop=("FROM", "SUBMIT"))
    gpu_h = "unknown" if a.gpu_hours is None else hours(a.gpu_hours)
    lost_h = "" if a.requeued_gpu_hours is None else f", {hours(a.requeued_gpu_hours)} GPU-hours"
    output.line(f"  wall time {duration(a.wall_s)}; allocated {duration(a.allocated_s)}, {gpu_h} GPU-hours")
    output.line(f"  waiting without an allocation {duration(a.waiting_s)}; "
                f"{a.requeues} requeue(s) lost up to {duration(a.requeued_s)}{lost_h}; "
                f"{a.failed_attempts} failed attempt(s) inside allocations")
    steps = "no progress reported" if a.steps is None else f"step {a.steps}"
    share = "-" if a.goodput is None else f"{100 * a.goodput:.1f} %"
    output.line(f"  allocations not requeued {duration(a.kept_s)}, {share} of wall time (an upper bound on ETTR); "
                f"{steps}")
    c = found.causes
    if c is None:
        return
    output.line(f"  time by cause: queue {duration(a.waiting_s)}, start-up {duration(c.startup_s)}, "
                f"training kept {duration(c.kept_s)}, lost since a checkpoint {duration(c.lost_s)}, "
                f"recovery {duration(c.recovery_s)}"
                + (f", no progress reported {duration(c.unreported_s)}" if c.unreported_s else ""))
    ettr = "-" if c.ettr is None else f"{100 * c.ettr:.1f} %"
    output.line(f"  ETTR (training kept / allocated) {ettr}; {len(c.failures)} failure(s)")
    save, recovery = c.measured()
    if save is not None or recovery is not None:
        said = [f"saves {save:.1f} s (median of {len(c.saves_s)})" if save is not None else "",
                f"recovery {recovery:.1f} s (median)" if recovery is not None else ""]
        flags = [f"--save-s {max(1, math.ceil(save))}" if save is not None else "",
                 f"--restart-s {math.ceil(recovery)}" if recovery is not None else ""]
        output.line(f"  measured: {', '.join(x for x in said if x)}; for the cadence: clusterkit plan ... "
                    f"{' '.join(x for x in flags if x)} (or the site's reliability: keys)")
    for f in c.failures:
        verdict = (f"; doctor (on its logs, now): {f.verdict}" if f.judged_by == "doctor" else
                   f"; doctor: {f.verdict}" if f.verdict else f"; not judged: {f.not_judged}" if f.not_judged else "")
        dropped = f"; dropped {', '.join(f.dropped)}" if f.dropped else ""
        since = f"the checkpoint at {_when(f.checkpoint)}" if f.checkpoint is not None else "its training began"
        output.line(printable(f"    job {f.job_id} restart {f.restart}, {_when(f.time)}: {f.what}{verdict}{dropped}; "
                              f"lost {duration(f.lost_s)} since {since}"))
