"""``clusterkit status JOB --run``: the account of the run JOB belongs to (docs/jobs.md, "What a
run cost").  The run is every job of JOB's site recorded under JOB's run name (its restarts and
requeues are Slurm's runs of one job; its chain members and later ``--run-name`` jobs are jobs of
their own).  Slurm jobs' allocations come from one sacct call; a local job's, or a Slurm job's
where sacct does not answer (no slurmdbd), from clusterkit's record: submission to the result.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from clusterkit import heartbeat, jobfiles, slurmclient
from clusterkit.chain import run_name_of
from clusterkit.scheduler import traits
from clusterkit.scheduler.runaccount import Account, Allocation, Member, account
from clusterkit.scheduler.runcauses import Causes, Fault, JobFacts, Mark, causes
from clusterkit.scheduler.slurm.sacct_runs import query as sacct_query
from clusterkit.supervise import attempts
from clusterkit.tooltext import parse_iso

if TYPE_CHECKING:
    from clusterkit.scheduler.base import JobStatus
    from clusterkit.scheduler.records import JobRecord, RecordStore

    from .job import Job

RECENT = 500     # how many of the newest records are searched for the run's jobs


@dataclass(frozen=True)
class RunAccount:
    account: Account
    allocations: tuple[Allocation, ...]
    warnings: tuple[str, ...] = field(default=())
    causes: Causes | None = None

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self.account), "allocations": [asdict(a) for a in self.allocations],
                "causes": None if self.causes is None else asdict(self.causes), "warnings": list(self.warnings)}

    def html(self, now: float | None = None) -> str:
        """The account as one self-contained page (:mod:`clusterkit.scheduler.runpage`)."""
        from clusterkit.scheduler.runcauses import causes as no_causes
        from clusterkit.scheduler.runpage import page

        return page(self.account, self.allocations, self.causes or no_causes([], 0.0), self.warnings, now)


def _facts(rec: JobRecord | None, job_id: str, allocs: tuple[Allocation, ...]) -> JobFacts:
    """A job's allocations with its progress marks and the supervisor's judged attempts (none for a
    job of the run recorded elsewhere)."""
    if rec is None:
        return JobFacts(job_id, allocs)
    marks = tuple(Mark(p.time, p.step, p.phase)
                  for p in heartbeat.read_log(jobfiles.PROGRESS_LOG.path(rec.run_dir, rec.job_id)))
    faults = tuple(Fault(a.ended, restart, a.attempt, a.verdict, tuple(h for h, _ in a.dropped), a.then)
                   for restart, a in attempts.read(rec.run_dir, rec.job_id))
    return JobFacts(job_id, allocs, marks, faults)


def _plan_gpus(rec: JobRecord) -> int | None:
    """The GPUs the job's plan allocates: GPUs per node times its nodes, spares included."""
    plan = rec.plan if isinstance(rec.plan, dict) else {}
    gpn, spares = plan.get("gpus_per_node"), plan.get("spares", 0)
    if not isinstance(spares, int) or isinstance(spares, bool) or not 0 <= spares <= 100_000:
        spares = 0
    if isinstance(gpn, int) and not isinstance(gpn, bool) and 0 <= gpn <= 4096:
        return gpn * (rec.nnodes + spares)
    return None


def _gpus_from_plan(rec: JobRecord, allocs: list[Allocation], warnings: list[str]) -> list[Allocation]:
    """Where Slurm's accounting names no GPU for a job whose plan asked for some (a slurm.conf
    whose AccountingStorageTRES lacks gres/gpu), the plan's count, said in a warning."""
    planned = _plan_gpus(rec)
    if not planned or not any(a.gpus == 0 and a.elapsed_s > 0 for a in allocs):
        return allocs
    warnings.append(f"sacct's AllocTRES names no GPU for job {rec.job_id} (is gres/gpu in Slurm's "
                    f"AccountingStorageTRES?); its GPU-hours count the {planned} GPUs of its plan")
    return [replace(a, gpus=planned) if a.gpus == 0 else a for a in allocs]


def _from_record(rec: JobRecord, st: JobStatus, now: float) -> Allocation:
    """The job's one allocation as its record tells it: submitted and started at submission, ended
    when the job script wrote its result; the GPUs its plan asked for."""
    from clusterkit.scheduler.status import ended_at

    start = parse_iso(rec.submitted_at)
    end = parse_iso(ended_at(rec)) if st.terminal else None
    stop = end if end is not None else (now if not st.terminal else start)
    elapsed = max(0.0, stop - start) if start is not None and stop is not None else 0.0
    return Allocation(rec.job_id, st.state.value, start, start, end if st.terminal else None, elapsed,
                      _plan_gpus(rec), source="record")


def _user() -> str | None:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, OSError):
        return None


def _tagged(recs: list[JobRecord], run_name: str, run: slurmclient.Run, accounted: dict[str, list[Allocation]],
            warnings: list[str], now: float) -> dict[str, list[Allocation]]:
    """The run's jobs as Slurm's accounting groups them: this user's jobs whose comment is the run's
    tag (:mod:`clusterkit.job.runtag`), since a day before its first recorded submission."""
    from clusterkit.job.runtag import tag
    from clusterkit.scheduler.slurm.sacct_runs import tagged

    slurm = [r for r in recs if traits(r.scheduler).accounted]
    user = _user()
    if not slurm or user is None or not accounted:
        return {}
    since = min(parse_iso(r.submitted_at) or now for r in slurm) - 86400
    got = tagged(tag(run_name), user, since, run, now=now)
    if isinstance(got, str):
        warnings.append(f"cannot search Slurm's accounting for the run's tag ({got}); its jobs are those recorded here")
        return {}
    found, _ = got
    by_tag: dict[str, list[Allocation]] = {}
    for a in found:
        by_tag.setdefault(a.job_id, []).append(a)
    missing = sorted(j for j in accounted if j not in by_tag)
    if missing:
        warnings.append(f"Slurm's accounting shows no run tag {tag(run_name)} for job(s) {', '.join(missing[:5])}: "
                        "submitted before clusterkit tagged runs, or slurm.conf lacks "
                        "AccountingStoreFlags=job_comment; counted from clusterkit's records")
    return by_tag


def job_of_run(ref: str | None, store: RecordStore | None = None) -> Job | None:
    """The newest recorded job of the run named ``ref`` (a run name, not a job id or SITE:JOB_ID),
    or None where ``ref`` is not one or no recent record writes it."""
    from clusterkit.job.longrun import RUN_NAME
    from clusterkit.scheduler.records import RecordStore
    from clusterkit.vocab import is_job_id

    from .job import Job

    if not ref or is_job_id(ref) or ":" in ref or not RUN_NAME.fullmatch(ref):
        return None
    store = store or RecordStore()
    recs, _ = store.recent(RECENT)
    named = [r for r in recs if run_name_of(r) == ref]
    if not named:
        return None
    newest = max(named, key=lambda r: (parse_iso(r.submitted_at) or 0.0, len(r.job_id), r.job_id))
    return Job(newest, store)


def run_records(job: Job) -> list[JobRecord]:
    """The recorded jobs of ``job``'s run, oldest first (``job`` itself always among them)."""
    rec = job.record
    name = run_name_of(rec)
    recs, _ = job._store.recent(RECENT)
    same = {r.key: r for r in recs if r.site == rec.site and run_name_of(r) == name}
    same[rec.key] = rec
    return sorted(same.values(), key=lambda r: (parse_iso(r.submitted_at) or 0.0, len(r.job_id), r.job_id))


def run_account(job: Job, *, run: slurmclient.Run = slurmclient.run, now: float | None = None) -> RunAccount:
    """What ``job``'s run cost and kept (:mod:`clusterkit.scheduler.runaccount`)."""
    from clusterkit.scheduler.slurm.tables import SlurmQuery
    from clusterkit.scheduler.status import refresh

    now = time.time() if now is None else now
    recs = run_records(job)
    query = SlurmQuery(run=run)
    statuses = dict(zip([r.key for r in recs], [st for _, st in refresh(recs, query)], strict=True))
    warnings: list[str] = []
    if query.unreachable:
        warnings.append(f"{query.unreachable}; Slurm jobs' states are the last known")
    slurm_ids = [r.job_id for r in recs if traits(r.scheduler).accounted]
    by_job: dict[str, list[Allocation]] = {}
    sacct_ok = False
    if slurm_ids:
        got = sacct_query(slurm_ids, run)
        if isinstance(got, str):
            warnings.append(f"no accounting from sacct ({got}); Slurm jobs' times are their records' "
                            "(submission to end, queue time counted as allocated)")
        else:
            found, skipped = got
            sacct_ok = True
            if skipped:
                warnings.append(f"{skipped} sacct row(s) that do not fit were left out")
            for a in found:
                by_job.setdefault(a.job_id, []).append(a)
    tagged = _tagged(recs, run_name_of(job.record), run, by_job, warnings, now)
    members = []
    for rec in recs:
        st = statuses[rec.key]
        allocs = by_job.get(rec.job_id) if traits(rec.scheduler).accounted else None
        if allocs:
            allocs = _gpus_from_plan(rec, allocs, warnings)
        if traits(rec.scheduler).accounted and not allocs and sacct_ok:
            # not in Slurm's accounting yet (pending): submitted, no allocation
            allocs = [Allocation(rec.job_id, st.state.value, parse_iso(rec.submitted_at), None, None, 0.0, None,
                                 "record")]
        beat = heartbeat.read(jobfiles.PROGRESS.path(rec.run_dir, rec.job_id))
        failed = len(job.__class__(rec, job._store).attempts())
        members.append(Member(rec.job_id, tuple(allocs or [_from_record(rec, st, now)]), failed,
                              beat.step if beat else None, beat.time if beat else None,
                              ended=st.terminal and not st.stale))
    recorded = {r.job_id for r in recs if traits(r.scheduler).accounted}
    for jid, allocs in sorted(tagged.items(), key=lambda kv: (kv[1][0].submit or 0.0, len(kv[0]), kv[0])):
        if jid not in recorded:   # a job of the run clusterkit holds no record of here (another machine's)
            members.append(Member(jid, tuple(allocs), ended=all(a.end is not None for a in allocs)))
    acct = account(run_name_of(job.record), members, now)
    by_id = {r.job_id: r for r in recs}
    facts = [_facts(by_id.get(m.job_id), m.job_id, m.allocations) for m in members]
    from .account_verdicts import judged

    return RunAccount(acct, tuple(a for m in members for a in m.allocations), tuple(warnings),
                      judged(causes(facts, now), by_id))
