"""``submit --after / --chain / --run-name``: jobs that make one training run together.

* ``--after JOB[:ok|any]``: ``#SBATCH --dependency=afterok:ID`` (or ``afterany``); JOB is a
  Slurm job id or a clusterkit record (``SITE:JOB_ID``), which must be a Slurm job.
* ``--run-name NAME``: the job's ``CK_CHECKPOINT_DIR`` is ``<checkpoint storage>/checkpoints/<user>/NAME``.
  A run name another live job writes (its record, and Slurm's state of it) is refused, unless the
  new job waits for that job (``--after``) or for a member of its chain.
* ``--chain N``: N jobs, the first as asked, each later one ``afterany`` the one before and
  sharing the first one's run name; once all are queued the chain's ids file is written in the
  first member's run directory (what a failing member reads to cancel the rest, see
  :mod:`clusterkit.job.longrun`).  A member that cannot be queued cancels the members queued
  before it: a chain is queued whole or not at all.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from clusterkit import actions
from clusterkit.config.schema import Site
from clusterkit.diagnose.catalogue import NOT_FIXED_BY_RESTART
from clusterkit.errors import ClusterkitError, InputError, PlanError, RecordError, SubmitError
from clusterkit.job.longrun import CHAIN_IDS, After, ChainLink, check_chain, default_run_name
from clusterkit.job.request import JobRequest
from clusterkit.scheduler import traits

if TYPE_CHECKING:
    from clusterkit.rundir import RenderedRun
    from clusterkit.scheduler.jobs import Submission
    from clusterkit.scheduler.records import JobRecord, RecordStore
    from clusterkit.scheduler.slurm.tables import SlurmQuery

#: How many of the newest records (beside every record not known to have ended) the run-name check reads.
_RECENT = 200


def resolve_after(store: RecordStore, after: After) -> After:
    """``after`` with the Slurm job id its ``SITE:JOB_ID`` names (that record must exist and be a
    Slurm job); a bare id is Slurm's own (sbatch refuses one it does not know)."""
    if ":" not in after.ref:
        return after
    try:
        rec = store.find(after.ref)
    except RecordError as exc:
        raise InputError(f"--after {after.ref}: {exc}") from None
    if not traits(rec.scheduler).holds:
        raise InputError(f"--after {after.ref}: a {rec.scheduler} job; only a Slurm job can be waited for")
    return replace(after, job_id=rec.job_id)


def run_name_of(rec: JobRecord) -> str:
    """The run name a recorded job writes (its --run-name, else its job name and id)."""
    given = rec.plan.get("run_name")
    return given if isinstance(given, str) and given else default_run_name(rec.job_name, rec.job_id)


def _chain_ids_file(rec: JobRecord) -> str | None:
    chain = rec.plan.get("chain")
    if not isinstance(chain, dict):
        return None
    ids = chain.get("ids_file")
    return ids if isinstance(ids, str) and ids else os.path.join(rec.run_dir, CHAIN_IDS)


def check_run_name_free(store: RecordStore, site: str, run_name: str, waits_for: str | None = None,
                        query: SlurmQuery | None = None) -> None:
    """Refuse ``run_name`` while another job of ``site`` that may still run writes it (records,
    then Slurm's state of them), unless the new job waits for it (``waits_for``) or for a later
    member of its chain."""
    from clusterkit.scheduler.status import may_still_run, refresh

    recs, _ = store.recent(_RECENT)
    same = [r for r in recs if r.site == site and run_name_of(r) == run_name]
    if not same:
        return
    waited = next((r for r in same if r.job_id == waits_for), None)
    waited_chain = _chain_ids_file(waited) if waited is not None else None
    for rec, st in refresh(same, query):
        if rec.job_id == waits_for or (waited_chain is not None and _chain_ids_file(rec) == waited_chain):
            continue
        if may_still_run(st):
            raise PlanError(f"job {rec.job_id} ({st.state.value}) writes run {run_name} now, and two jobs writing "
                            "one run would overwrite each other's checkpoints: wait for it, cancel it, or start "
                            f"after it (--after {rec.job_id}:any)", field="run_name", value=repr(run_name))


@dataclass(frozen=True)
class Queued:
    run: RenderedRun
    submission: Submission


def check_not_array(request: JobRequest) -> None:
    """A chain of job arrays is refused: each member would be a whole array, and which task of the
    next member resumes which task's checkpoints is not defined."""
    if request.array is not None:
        raise InputError("--chain with --array or --sweep: a chain of job arrays is not supported; "
                         "queue each array with --after ARRAYJOB:any and the same --run-name instead")


def submit(site: Site, request: JobRequest, out: str | None, store: RecordStore, *, after: After | None = None,
           chain: int | None = None, skip_preflight: bool = False, preflight_transport: str | None = None,
           on_gate: Callable[[actions.Gate], None] | None = None,
           query: SlurmQuery | None = None) -> list[Queued]:
    """Submit ``request`` (after ``after``, as a chain of ``chain`` jobs); the queued jobs, in order."""
    if (after is not None or chain is not None) and not traits(site.scheduler.kind).holds:
        what = "--chain" if chain is not None else "--after"
        raise InputError(f"{what}: site {site.name} is a local site: no Slurm to hold a job until another ends")
    store.check_writable()
    if after is not None:
        after = resolve_after(store, after)
        request = replace(request, dependency=after.dependency)
    if request.run_name is not None:
        check_run_name_free(store, site.name, request.run_name, after.job_id if after else None, query)
    if chain is None:
        run, sub = actions.submit(site, request, out, store, skip_preflight=skip_preflight,
                                  preflight_transport=preflight_transport, on_gate=on_gate)
        return [Queued(run, sub)]
    n = check_chain(chain)
    check_not_array(request)
    if out is not None:
        out = os.path.abspath(os.path.expanduser(out))
    # member 1 waits held until the ids file lists every member: one that failed at once would
    # otherwise find no later member to cancel (each member's code snapshot takes its seconds)
    held = replace(request.job, sbatch=(*request.job.sbatch, ("hold", None)))
    first_req = replace(request, job=held, chain=ChainLink(1, n, ids_file="", unfixable=NOT_FIXED_BY_RESTART))
    run, sub = actions.submit(site, first_req, None if out is None else f"{out}/member-1", store,
                              skip_preflight=skip_preflight, preflight_transport=preflight_transport, on_gate=on_gate)
    queued = [Queued(run, sub)]
    first = sub.record
    run_name = request.run_name or default_run_name(first.job_name, first.job_id)
    ids_file = str(Path(first.run_dir) / CHAIN_IDS)
    try:
        for k in range(2, n + 1):
            prev = queued[-1].submission.record
            link = ChainLink(k, n, ids_file=ids_file, previous_id=prev.job_id, previous_run_dir=prev.run_dir,
                             unfixable=NOT_FIXED_BY_RESTART)
            member = replace(request, run_name=run_name, dependency=f"afterany:{prev.job_id}", chain=link)
            run, sub = actions.submit(site, member, None if out is None else f"{out}/member-{k}", store,
                                      skip_preflight=True)
            queued.append(Queued(run, sub))
        from clusterkit.scheduler.records import atomic_write_text

        atomic_write_text(Path(ids_file), "".join(f"{q.submission.record.job_id}\n" for q in queued))
        _release(first.job_id)
    except BaseException as exc:
        _cancel_all(queued)
        if not isinstance(exc, ClusterkitError):
            raise
        ids = ", ".join(q.submission.record.job_id for q in queued)
        err = SubmitError(f"chain member {len(queued) + 1} of {n} was not queued ({exc}); "
                          f"cancelled the members queued before it ({ids})")
        err.exit_code = exc.exit_code
        raise err from None
    return queued


def _release(job_id: str) -> None:
    """``scontrol release`` member 1, held until the chain's ids file was written."""
    from clusterkit import slurmclient

    proc = slurmclient.run(["scontrol", "release", job_id], 60)
    if proc.returncode != 0:
        raise SubmitError(f"scontrol release {job_id} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1][:200]}")


def _cancel_all(queued: list[Queued]) -> None:
    from clusterkit.scheduler.slurm import cancel_slurm

    for q in reversed(queued):
        with contextlib.suppress(ClusterkitError):  # best effort: the error that stopped the chain is the one to report
            cancel_slurm(q.submission.record.job_id)
