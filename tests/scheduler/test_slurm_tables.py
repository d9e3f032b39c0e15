"""Slurm's tables (sacct --parsable2, squeue), on captured text that looks exactly like Slurm's."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.scheduler.slurm import tables as t
from tests.totality import assert_total

DATA = Path(__file__).resolve().parents[1] / "data" / "scheduler"
OTHER = Path(__file__).resolve().parents[1] / "data" / "preflight"  # other tools' text: garbage here


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8", errors="replace")


def test_sacct_parsable2() -> None:
    table = t.parse_sacct(read("sacct_parsable2.txt"))
    assert isinstance(table, t.SacctTable)
    jobs = table.job_rows()
    assert [r.job_id for r in jobs] == ["4242", "4243", "4244", "4245", "4246_3"]
    cancelled = table.job_rows("4243")[0]
    assert cancelled.state == "CANCELLED" and cancelled.state_detail == "by 1000" and cancelled.exit_code == (0, 15)
    assert table.job_rows("4246")[0].state == "FAILED" and table.job_rows("4246")[0].exit_code == (1, 0)
    assert table.rows[1].is_step and table.rows[1].job_id == "4242.batch"
    assert table.job_rows("4245")[0].fields["NodeList"] == "None assigned"


def test_sacct_duplicates_count_restarts() -> None:
    """``sacct -D``: one line per run of a requeued job; the last run is the state, the others restarts."""
    st = t.sacct_statuses(read("sacct_duplicates_requeued.txt"))["4301"]
    assert (st.state, st.restarts, st.nodes, st.source) == ("PENDING", 1, None, "sacct")
    # right after the requeue only the ended run is recorded: still one restart
    st = t.sacct_statuses(read("sacct_duplicates_requeue_only.txt"))["4301"]
    assert (st.state, st.restarts, st.nodes) == ("REQUEUED", 1, "node1")
    # a job that ran once
    st = t.sacct_statuses("4242|COMPLETED|0:0|gpu[001-002]\n")["4242"]
    assert (st.state, st.exit_code, st.restarts) == ("COMPLETED", 0, 0)


def test_sacct_noheader_and_bad_rows() -> None:
    table = t.parse_sacct("77|RUNNING|0:0\n", fields=["JobID", "State", "ExitCode"])
    assert isinstance(table, t.SacctTable) and table.rows[0].state == "RUNNING"
    bad = t.parse_sacct("JobID|State\n1|RUNNING|extra\n")
    assert isinstance(bad, t.ParseFailure) and "row 1" in bad.reason
    assert isinstance(t.parse_sacct("sacct: error: Problem talking to the database: Connection refused\n"),
                      t.ParseFailure)
    skipped = t.parse_sacct("JobID|State\n1|RUNNING|extra\n2|PENDING\n", skip_bad_rows=True)
    assert isinstance(skipped, t.SacctTable) and [r.job_id for r in skipped.rows] == ["2"]


def test_squeue_default_format_with_reason_spaces() -> None:
    rows = t.parse_squeue(read("squeue_default.txt"))
    assert isinstance(rows, tuple) and [r.job_id for r in rows] == ["4245", "4247", "4248"]
    assert rows[0].state == "PD"
    assert rows[0].fields["NODELIST(REASON)"] == "(ReqNodeNotAvail, UnavailableNodes:gpu[003,017])"


def test_squeue_custom_format() -> None:
    rows = t.parse_squeue(read("squeue_pipes.txt"), fields=["JOBID", "STATE", "TIME", "NODES", "REASON"])
    assert isinstance(rows, tuple) and rows[1].state == "RUNNING" and rows[0].fields["REASON"] == "Resources"
    assert isinstance(t.parse_squeue("slurm_load_jobs error: Unable to contact slurm controller\n"), t.ParseFailure)


@pytest.mark.parametrize("parser", [t.parse_sacct, t.parse_squeue, t.squeue_statuses, t.sacct_statuses,
                                    t.scontrol_statuses, t.parse_scontrol_jobs], ids=lambda f: f.__name__)
def test_parsers_are_total_on_mangled_captures(parser) -> None:  # type: ignore[no-untyped-def]
    """Shuffled, truncated and spliced captures never raise: they parse or fail with raw kept."""
    captures = [f.read_text(encoding="utf-8", errors="replace") for d in (DATA, OTHER) for f in sorted(d.iterdir())]
    assert_total(parser, captures)
