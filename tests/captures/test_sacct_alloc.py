"""Real ``sacct -P --noheader`` text with ``ElapsedRaw``, ``Submit`` and ``AllocTRES``
(tests/data/captures/sacct-alloc) through the reader of a run's allocations
(``scheduler.slurm.sacct_runs``) and the run account's arithmetic.

``<name>.expected.json`` holds what was counted off the capture by hand (``awk -F'|'``, never
through clusterkit): the job rows (no ``.batch``/``.extern``/``.N`` step), the sum of their
``ElapsedRaw``, the jobs with a ``gres/gpu=`` entry and the GPU-seconds (``ElapsedRaw`` times
``gres/gpu=N``), and for some jobs their state, GPUs and seconds from Submit to Start.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest

from clusterkit.scheduler.runaccount import Member, account
from clusterkit.scheduler.slurm.sacct_runs import FIELDS, allocations, query
from tests.captures.capture import Capture, captures

CAPTURES = captures("sacct-alloc")


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_job_rows_elapsed_and_gpus_as_counted_by_hand(cap: Capture) -> None:
    got, skipped = allocations(cap.body, cap.expected["fields"])
    assert skipped == 0
    assert len(cap.body.splitlines()) == cap.expected["rows"]
    assert len(got) == cap.expected["jobs"]
    assert sum(a.elapsed_s for a in got) == cap.expected["elapsed_s"]
    assert sum(1 for a in got if a.gpus) == cap.expected["gpu_jobs"]
    # a typed entry beside the untyped total (gres/gpu:rtx30=1,gres/gpu=1) is one GPU, not two
    assert sum(a.elapsed_s * (a.gpus or 0) for a in got) == cap.expected["gpu_seconds"]
    by_id = {a.job_id: a for a in got}
    for job, want in cap.expected["some"].items():
        a = by_id[job]
        assert (a.state, a.elapsed_s, a.gpus) == (want["state"], want["elapsed_s"], want["gpus"]), job
        assert a.start is not None and a.submit is not None and a.end is not None
        assert a.start - a.submit == want["queued_s"], job
        assert a.end - a.start == want["end_minus_start_s"], job


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_one_jobs_account_from_the_capture(cap: Capture) -> None:
    """A job of the capture as a run of its own: wall time is its queue wait plus its
    allocation, the wait is time without an allocation, GPU-hours are elapsed x GPUs."""
    got, _ = allocations(cap.body, cap.expected["fields"])
    for job, want in cap.expected["some"].items():
        a = next(x for x in got if x.job_id == job)
        acct = account("r", [Member(job, (a,))], now=0.0)
        assert acct.wall_s == want["queued_s"] + want["end_minus_start_s"]
        assert acct.waiting_s == want["queued_s"]
        assert acct.gpu_hours == pytest.approx(want["elapsed_s"] * want["gpus"] / 3600)
        assert acct.requeues == 0 and acct.kept_s == want["elapsed_s"]


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_query_asks_once_and_reads_the_answer(cap: Capture) -> None:
    """The sacct call the account makes, answered by the capture's job rows cut to query's own
    fields (each row's cells picked by name): one call for every job of the run."""
    fields: Sequence[str] = cap.expected["fields"]
    rows = [dict(zip(fields, ln.split("|"), strict=True)) for ln in cap.body.splitlines()]
    cut = "".join("|".join(r[f] for f in FIELDS) + "\n" for r in rows)
    calls: list[list[str]] = []

    def run(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        return subprocess.CompletedProcess(list(argv), 0, cut, "")

    got = query(["974745", "974724", "974724", "bad id"], run)
    assert isinstance(got, tuple)
    assert calls == [["sacct", "-X", "-D", "-P", "-n", "-j", "974724,974745", "-o", ",".join(FIELDS)]]
    assert len(got[0]) == cap.expected["jobs"] and got[1] == 0

    def refused(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(list(argv), 1, "", "sacct: error: Slurm accounting storage is disabled\n")

    why = query(["974745"], refused)
    assert why == "sacct failed (exit 1): sacct: error: Slurm accounting storage is disabled"
