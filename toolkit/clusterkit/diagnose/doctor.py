"""``clusterkit doctor``: read every log, ask Slurm, answer with one verdict per restart."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from pathlib import Path
from typing import Any

from clusterkit import jobfiles, pyspy, scheduler, stackdump
from clusterkit.diagnose import catalogue, evidence, flight, hardware, names, reader, verdict
from clusterkit.diagnose.diagnosis import Diagnosis as Diagnosis  # re-exported
from clusterkit.errors import ClusterkitError, ExitCode, InputError, RecordError, SlurmUnreachable, SubmitError
from clusterkit.scheduler import arrays, traits
from clusterkit.scheduler.base import JobStatus
from clusterkit.scheduler.logs import log_files
from clusterkit.scheduler.records import JobRecord, RecordStore
from clusterkit.scheduler.slurm.tables import SlurmQuery
from clusterkit.scheduler.status import refresh
from clusterkit.vocab import JobState


class LogsUnreadable(ClusterkitError):
    """Nothing could be read: no log, or no scheduler answer and no log."""

    exit_code = ExitCode.UNREACHABLE


Progress = Callable[[int], None]
# given the bytes about to be read, a context that yields a progress callback (or None)
ProgressBar = Callable[[int], AbstractContextManager[Progress | None]]


def _scan(files: Sequence[Path], view: verdict.SlurmView | None, job: str | None,
          bar: ProgressBar | None) -> dict[str, Any]:
    total = 0
    for p in files:
        with suppress(OSError):
            total += p.stat().st_size
    with (bar(total) if bar is not None else nullcontext(None)) as tick:
        return diagnose_files(files, view, job=job, progress=tick)


def diagnose_logs(paths: Sequence[Path], bar: ProgressBar | None = None) -> Diagnosis:
    """``doctor --logs PATH...``: the verdict from log files (and directories of them) alone."""
    if not paths:
        raise InputError("--logs needs at least one PATH")
    files, missing = reader.expand(list(paths))
    if not files:
        raise LogsUnreadable(f"no log files to read in {', '.join(map(str, paths))}")
    files, copies = names.without_copies(files)
    report = _scan(files, None, None, bar)
    report["files"]["copies_left_out"] = copies
    fr = report["flight_recorder"]
    if report["files"]["read"] == 0 and not fr["dumps"]:
        raise LogsUnreadable("; ".join(report["files"]["unreadable"] + fr["unreadable"]))
    return Diagnosis(report, list(missing))


def diagnose_job(ref: str, bar: ProgressBar | None = None, store: RecordStore | None = None) -> Diagnosis:
    """``doctor JOB``: the job's logs and Slurm's view of it; a verdict on an ended job is
    kept in its record (``status`` shows it)."""
    store = store or RecordStore()
    try:
        rec = store.find(ref)
    except RecordError as exc:  # for doctor, exit 1 means "a failure was diagnosed": a bad JOB is usage
        raise InputError(str(exc)) from exc
    if arrays.is_array(rec):
        from clusterkit.diagnose.arrays import diagnose_array

        return diagnose_array(rec, lambda task: _diagnose_record(task, bar, store), SlurmQuery())
    return _diagnose_record(rec, bar, store)


def _diagnose_record(rec: JobRecord, bar: ProgressBar | None, store: RecordStore) -> Diagnosis:
    """``doctor JOB`` for one job (or one array task: its verdict is not cached, its array's record is)."""
    files = log_files(rec) + flight.job_dumps(Path(rec.run_dir), rec.job_id)
    view, slurm, err = None, None, None
    try:
        view, slurm = slurm_view(rec, SlurmQuery())
    except SubmitError as exc:
        err = str(exc)
    if not files and err:
        raise LogsUnreadable(f"job {rec.job_id}: no log files in {rec.run_dir}, and {err}")
    notes = [] if files else [f"job {rec.job_id} has no log files in {rec.run_dir}"]
    report = _scan(files, view, rec.key, bar)
    nodes = _job_nodes(view) if traits(rec.scheduler).allocates else set()
    for run in report["restarts"]:  # the advice in words the job's launcher takes
        v = run["verdict"]
        # a line names a rank or node only within the job: its world size, the nodes Slurm gave it
        if isinstance(v.get("rank"), int) and not 0 <= v["rank"] < rec.world_size:
            v["rank"] = None
        if nodes and v.get("node") is not None and v["node"] not in nodes:
            v["node"] = None
        v["advice"] = evidence.with_node(catalogue.advice(v["category"], rec.launcher), v["node"])
    # the scheduler's view under its own name; "slurm" (a queue's controller's view) only for a
    # Slurm job, never for a local one
    report["scheduler"] = None if slurm is None else {"kind": rec.scheduler, **slurm}
    report["slurm"] = slurm if traits(rec.scheduler).queued else None
    report["run_dir"] = rec.run_dir
    report["stack_dumps"] = stack_dumps(jobfiles.logs(rec.run_dir), rec.job_id)
    report["py_spy"] = py_spy_dumps(jobfiles.logs(rec.run_dir), rec.job_id)
    if err:
        report["slurm_error"] = err
    elif view is not None and JobState.parse(view.state or "").is_terminal and not arrays.is_task(rec):
        store.save(rec.model_copy(update={"diagnosis": one_line(report)}))
    return Diagnosis(report, notes)


def stack_dumps(logs: Path, job_id: str) -> dict[str, Any] | None:
    """The ranks' newest stack dumps the supervisor asked for on a stall (:mod:`clusterkit.stackdump`):
    each rank's innermost frame, the ranks behind (silent, or outside any collective while the others
    wait in one); None where none was asked for."""
    got = [d for rank, path in stackdump.files(logs, job_id) if (d := stackdump.read(path, rank)) is not None]
    if not got:
        return None
    asked = max((d.asked for d in got if d.asked is not None), default=None)
    return {"asked": asked, "summary": stackdump.summary(got), "behind": [d.to_dict() for d in stackdump.behind(got)],
            "ranks": [d.to_dict() for d in got]}


def py_spy_dumps(logs: Path, job_id: str) -> dict[str, Any] | None:
    """py-spy's dumps of the ranks the supervisor took on a stall (:mod:`clusterkit.pyspy`), judged as the
    stack dumps are: each rank's innermost frame, the ranks behind; None where none was taken."""
    got = pyspy.read_all(logs, job_id)
    if not got:
        return None
    asked = max((d.asked for d in got if d.asked is not None), default=None)
    return {"asked": asked, "summary": stackdump.summary(got), "behind": [d.to_dict() for d in stackdump.behind(got)],
            "ranks": [d.to_dict() for d in got]}


def _job_nodes(view: verdict.SlurmView | None) -> set[str]:
    """The nodes Slurm gave the job (its NodeList), or none where it is not known."""
    from clusterkit.hostlist import HostlistError, expand

    try:
        return set(expand(view.nodes)) if view is not None and view.nodes else set()
    except HostlistError:
        return set()


def diagnose_files(files: Sequence[Path], view: verdict.SlurmView | None = None, *, job: str | None = None,
                   progress: Progress | None = None) -> dict[str, Any]:
    """The doctor report over ``files`` (and Slurm's view of the newest run, if known); the
    flight-recorder dumps among them are read apart (:mod:`~clusterkit.diagnose.flight`)."""
    dumps = [f for f in files if flight.is_dump(f)]
    files = [f for f in files if not flight.is_dump(f)]
    scans = reader.scan_files(files, progress)
    atts = verdict.attempts(s for s in scans if s.error is None)
    if not atts:
        atts = {0: verdict.Attempt(0)}
    newest = max(atts)
    restarts = []
    for r in sorted(atts, reverse=True):
        v = verdict.judge(atts[r], view if r == newest else None, completed=None if r == newest else False,
                          superseded=r != newest)
        v = hardware.outranks_oom(atts, r, v) or v
        restarts.append({"restart": r, "verdict": v, "cascade": verdict.cascade_rows(atts[r])})
    return {
        "job": job,
        "verdict": restarts[0]["verdict"],
        "cascade": restarts[0]["cascade"],
        "restarts": restarts,
        "slurm": None,
        "scheduler": None,
        "files": {"read": sum(1 for s in scans if s.error is None), "bytes": sum(s.bytes_read for s in scans),
                  "unreadable": [s.error for s in scans if s.error],
                  "cut": [s.path for s in scans if s.cut], "max_bytes_per_file": reader.FILE_MAX_BYTES},
        "engine": reader.ENGINE,
        "flight_recorder": flight.read(dumps),
    }


def one_line(report: dict[str, Any]) -> str:
    """The verdict in one line (what ``clusterkit status`` shows from the record)."""
    v = report["verdict"]
    where = ", ".join(x for x in (f"node {v['node']}" if v["node"] else "",
                                  f"rank {v['rank']}" if v["rank"] is not None else "") if x)
    cut = report["files"].get("cut") or []
    return (f"{v['category']}" + (f" ({where})" if where else "") + f": {v['summary']}"
            + (f" [{len(cut)} log file(s) cut at {report['files']['max_bytes_per_file'] >> 20} MiB]" if cut else ""))


# --------------------------------------------------------------------------- Slurm's side

def slurm_view(rec: JobRecord, query: SlurmQuery) -> tuple[verdict.SlurmView, dict[str, Any]]:
    """The job's state (squeue, sacct or scontrol, as ``status`` reads it), its steps, its down nodes."""
    (_, st), = refresh([rec], query)
    if query.unreachable is not None:
        # refresh() shows a stale state while slurmctld does not answer; doctor wants Slurm's own
        # word or none at all, and says it diagnosed from the logs alone
        raise SlurmUnreachable(query.unreachable)
    details = scheduler.get(rec.scheduler, query).details(rec, st)
    steps, down = details.steps, details.down_nodes
    view = verdict.SlurmView(state=st.state, reason=st.reason, exit_code=st.exit_code, signal=st.signal,
                             down_nodes=tuple(down), nodes=st.nodes, scheduler=rec.scheduler)
    return view, _slurm_json(st, steps, down)


def _slurm_json(st: JobStatus, steps: list[dict[str, str]], down: list[tuple[str, str]]) -> dict[str, Any]:
    return {"state": st.state, "exit_code": st.exit_code, "signal": st.signal, "reason": st.reason,
            "nodes": st.nodes, "restarts": st.restarts, "source": st.source, "steps": steps,
            "down_nodes": [{"node": n, "reason": r} for n, r in down]}

