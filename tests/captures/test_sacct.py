"""Real ``sacct --parsable2`` tables (tests/data/captures/sacct) through the table parser and the
statuses ``status`` reads.

``<name>.expected.json`` holds, counted off the capture by hand (``awk -F'|'`` over the lines,
never through clusterkit): the rows, the job-level rows (no ``.batch``/``.extern``/``.N``
step), their states (``CANCELLED by UID`` is CANCELLED), the tasks of each array
(``JOB_TASK``), and for some jobs the state and restart count ``status`` should give (a last
run that ended REQUEUED is one restart: its successor is pending), and where the table has a
NodeList, the nodes (``None assigned``: none).

A capture made with ``--noheader`` names its ``--format`` in a ``# fields:`` header line, and one
made with ``--delimiter`` its delimiter in ``# delimiter:``.
"""

from __future__ import annotations

from collections import Counter

import pytest

from clusterkit.scheduler.slurm.tables import SacctTable, parse_sacct, sacct_statuses
from clusterkit.vocab import JobState
from tests.captures.capture import Capture, captures

CAPTURES = captures("sacct")


def sep(cap: Capture) -> str:
    return cap.header.get("delimiter", "|")


def header(cap: Capture) -> list[str]:
    """The ``--format`` fields: the header line, or the capture's ``# fields:`` where sacct printed none."""
    if "fields" in cap.header:
        return cap.header["fields"].split(",")
    return cap.body.splitlines()[0].split(sep(cap))


def body_rows(cap: Capture) -> list[str]:
    """The lines after the header line (every line where there is none)."""
    lines = cap.body.splitlines()
    return [ln for ln in (lines if "fields" in cap.header else lines[1:]) if ln.strip()]


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_rows_jobs_and_states_as_counted_by_hand(cap: Capture) -> None:
    table = parse_sacct(cap.body, cap.header["fields"].split(",") if "fields" in cap.header else None, sep=sep(cap))
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
    got = sacct_statuses(cap.body, header(cap), sep(cap))     # a header line is no job: skipped
    assert len(got) == cap.expected["jobs"]
    nodes = cap.expected.get("nodes", {})
    for job, (state, restarts) in cap.expected["statuses"].items():
        st = got[job]
        assert (st.state, st.restarts) == (JobState(state), restarts), job
        assert st.source == "sacct" and st.exit_code is None   # no ExitCode asked
        assert st.nodes == nodes.get(job), job                 # none where no NodeList was asked


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_every_line_after_the_header_is_one_row(cap: Capture) -> None:
    """No row is dropped or merged: the strict parse (no skipping) reads the same rows."""
    strict = parse_sacct("\n".join(body_rows(cap)), header(cap), sep=sep(cap))
    assert isinstance(strict, SacctTable), strict
    assert [r.raw for r in strict.rows] == body_rows(cap)
    assert all(len(r.fields) == len(header(cap)) for r in strict.rows)


@pytest.mark.parametrize("cap", [c for c in CAPTURES if "node_fail_row" in c.expected], ids=lambda c: c.name)
def test_a_node_fail_row_read_field_by_field(cap: Capture) -> None:
    """A job that ended NODE_FAIL before it ran (``None assigned``, Start ``None``): each field as
    read off the line by hand, the ``--parsable`` row's last delimiter no field of its own."""
    table = parse_sacct(cap.body, header(cap), sep=sep(cap))
    assert isinstance(table, SacctTable), table
    want = cap.expected["node_fail_row"]
    (row,) = [r for r in table.rows if r.job_id == want["JobID"]]
    assert row.state == "NODE_FAIL" and not row.is_step
    assert {k: row.fields[k] for k in want} == want
    assert sacct_statuses(cap.body, header(cap), sep(cap))[want["JobID"]].state.is_terminal


@pytest.mark.parametrize("cap", [c for c in CAPTURES if sep(c) != "|"], ids=lambda c: c.name)
def test_another_delimiter_is_not_read_as_the_default(cap: Capture) -> None:
    """Read with the wrong delimiter, no row is a row: the table fails (or is empty when skipping)."""
    assert not isinstance(parse_sacct(cap.body, header(cap)), SacctTable)
    assert sacct_statuses(cap.body, header(cap)) == {}
