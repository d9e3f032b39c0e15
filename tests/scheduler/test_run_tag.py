"""The run tag (clusterkit/job/runtag.py): every Slurm job of a run carries
``--comment=clusterkit-run:<run name>``, and ``status --run`` finds the run's jobs by it in one
``sacct -u USER`` call, keeping only the user's own rows that carry the tag."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from clusterkit.job.runtag import run_of, tag
from clusterkit.scheduler.slurm.sacct_runs import TAG_FIELDS, mine, tagged


def test_a_tag_names_its_run_and_nothing_else_is_a_tag() -> None:
    assert tag("lm-7b") == "clusterkit-run:lm-7b" and run_of("clusterkit-run:lm-7b") == "lm-7b"
    for other in ("", "lm-7b", "clusterkit-run:", "clusterkit-run:../x", "clusterkit-run:a b", "run:lm-7b"):
        assert run_of(other) is None, other


def test_a_job_with_a_run_name_carries_its_tag_in_job_sbatch(ck, tmp_path: Path) -> None:
    got = ck("submit", "--dry-run", "--no-snapshot", "--site", "testbed", "--run-name", "lm-7b", "--out",
             str(tmp_path / "a"), "--", "python", "train.py")
    assert got.code == 0, got.err
    assert "#SBATCH --comment=clusterkit-run:lm-7b\n" in got.out
    # without a run name the tag holds the job id, so it is set once sbatch answered, not rendered
    plain = ck("submit", "--dry-run", "--no-snapshot", "--site", "testbed", "--out", str(tmp_path / "b"), "--",
               "python", "train.py")
    assert plain.code == 0, plain.err
    assert "--comment" not in plain.out


def test_a_comment_of_ones_own_is_refused_in_one_line(ck, tmp_path: Path) -> None:
    got = ck("submit", "--dry-run", "--no-snapshot", "--site", "testbed", "--sbatch", "comment=mine", "--out",
             str(tmp_path / "a"), "--", "python", "train.py")
    assert got.code == 2 and "--comment" in got.err and "--run-name" in got.err, got.err
    assert "Traceback" not in got.err and not (tmp_path / "a").exists()


def _row(job: str, user: str, comment: str, state: str = "COMPLETED") -> str:
    return "|".join([job, state, "2026-01-02T10:00:00", "2026-01-02T10:01:00", "2026-01-02T10:11:00", "600",
                     "billing=8,cpu=8,gres/gpu=2,mem=16G,node=1", user, comment])


def test_only_the_users_own_rows_with_the_tag_are_the_runs() -> None:
    text = "\n".join([
        _row("101", "ana", "clusterkit-run:lm", "NODE_FAIL"), _row("101", "ana", "clusterkit-run:lm"),
        _row("102", "bob", "clusterkit-run:lm"),           # another user's job with the same tag
        _row("103", "ana", "clusterkit-run:lm-2"),         # another run of hers
        _row("104", "ana", ""),                            # untagged
        _row("105", "ana", "clusterkit-run:lm|x"),         # a comment with the delimiter: does not fit
        _row("106.batch", "ana", "clusterkit-run:lm"),     # a step
        _row("107", "ana", "clusterkit-run:lm"),
    ])
    found, skipped = mine(text, "clusterkit-run:lm", "ana")
    assert [(a.job_id, a.state) for a in found] == [("101", "NODE_FAIL"), ("101", "COMPLETED"), ("107", "COMPLETED")]
    assert all(a.gpus == 2 and a.elapsed_s == 600 for a in found) and skipped == 1


def test_the_search_is_one_sacct_call_for_the_users_jobs_in_a_bounded_window() -> None:
    seen: list[list[str]] = []

    def run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, _row("9", "ana", "clusterkit-run:r") + "\n", "")

    got = tagged("clusterkit-run:r", "ana", since=0.0, run=run, now=400 * 86400.0)
    assert not isinstance(got, str) and [a.job_id for a in got[0]] == ["9"]
    (argv,) = seen
    assert argv[argv.index("-u") + 1] == "ana" and argv[argv.index("-o") + 1] == ",".join(TAG_FIELDS)
    assert "-a" not in argv and "--allusers" not in argv
    import time
    start = argv[argv.index("-S") + 1]     # never more than a year back, whatever `since` says
    assert time.mktime(time.strptime(start, "%Y-%m-%dT%H:%M:%S")) == pytest.approx(34 * 86400.0, abs=3600)


def test_sacct_failing_is_its_words_not_an_error() -> None:
    def run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "sacct: error: Problem talking to the database\n")

    got = tagged("clusterkit-run:r", "ana", since=0.0, run=run)
    assert isinstance(got, str) and "Problem talking to the database" in got
