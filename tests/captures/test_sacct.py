"""Real ``sacct --parsable2`` tables (tests/data/captures/sacct) through the table parser and the
statuses ``status`` reads.

``<name>.expected.json`` holds, counted off the capture by hand (``awk -F'|'`` over the lines,
never through clusterkit): the rows, the job-level rows (no ``.batch``/``.extern``/``.N``
step), their states (``CANCELLED by UID`` is CANCELLED), the tasks of each array
(``JOB_TASK``), and for some jobs the state and restart count ``status`` should give (a last
run that ended REQUEUED is one restart: its successor is pending).
"""

from __future__ import annotations

from collections import Counter

import pytest

from clusterkit.scheduler.slurm_tables import SacctTable, parse_sacct, sacct_statuses
from clusterkit.vocab import JobState
from tests.captures.capture import Capture, captures

CAPTURES = captures("sacct")


def header(cap: Capture) -> list[str]:
    return cap.body.splitlines()[0].split("|")


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_rows_jobs_and_states_as_counted_by_hand(cap: Capture) -> None:
    table = parse_sacct(cap.body)
    assert isinstance(table, SacctTable), table
    assert len(table.rows) == cap.expected["rows"]
    jobs = table.job_rows()
    assert len(jobs) == cap.expected["jobs"]
    assert dict(Counter(r.state for r in jobs)) == cap.expected["job_states"]
    for array, n in cap.expected["array_tasks"].items():
        tasks = [r for r in table.job_rows(array) if r.job_id != array]
        assert len(tasks) == n, array


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_statuses_of_arrays_and_requeued_jobs(cap: Capture) -> None:
    got = sacct_statuses(cap.body, header(cap))     # its header line is no job: skipped
    assert len(got) == cap.expected["jobs"]
    for job, (state, restarts) in cap.expected["statuses"].items():
        st = got[job]
        assert (st.state, st.restarts) == (JobState(state), restarts), job
        assert st.source == "sacct" and st.exit_code is None and st.nodes is None   # no such columns asked


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_every_line_after_the_header_is_one_row(cap: Capture) -> None:
    """No row is dropped or merged: the strict parse (no skipping) reads the same rows."""
    fields = header(cap)
    strict = parse_sacct("\n".join(cap.body.splitlines()[1:]), fields)
    assert isinstance(strict, SacctTable), strict
    assert [r.raw for r in strict.rows] == [ln for ln in cap.body.splitlines()[1:] if ln.strip()]
