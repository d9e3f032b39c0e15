"""Real ``squeue -h -t PENDING -o '%i|%P|%Q|%S|%r'`` output (tests/data/captures/squeue) through
:mod:`clusterkit.scheduler.slurm.queue`: the pending jobs, and each one's place in its queue as
``submit --wait`` and ``status`` show it.

``<name>.expected.json`` holds, read off the capture by hand: each pending job's partitions,
priority, start estimate (none where squeue prints ``N/A``) and reason, and the place of each
job id (``null``: none, for a job not listed or waiting on a dependency, a begin time or a
hold; else ``[position, pending, start]``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from clusterkit.scheduler.slurm import queue
from tests.captures.capture import Capture, captures, env_with, stand_in
from tests.totality import assert_total

CAPTURES = captures("squeue")


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_the_pending_jobs_as_read_by_hand(cap: Capture) -> None:
    got = queue.parse_pending(cap.body)
    assert {j: {"partitions": sorted(p.partitions), "priority": p.priority, "start": p.start, "reason": p.reason}
            for j, p in got.items()} == cap.expected["pending"]


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_each_jobs_place_in_its_queue(cap: Capture) -> None:
    table = queue.parse_pending(cap.body)
    for job_id, want in cap.expected["places"].items():
        spot = queue.spot_in(job_id, table)
        assert (None if spot is None else [spot.position, spot.waiting, spot.start]) == want, job_id


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_squeue_is_asked_once_through_the_client_seam(cap: Capture, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(tmp_path / "bin", "squeue", cap.body)   # a stand-in: one `cat` of the capture
    monkeypatch.setenv("PATH", env_with(tmp_path / "bin")["PATH"])
    for job_id, want in cap.expected["places"].items():
        spot = queue.spot(job_id)
        assert (None if spot is None else [spot.position, spot.waiting, spot.start]) == want, job_id


def test_no_answer_is_no_place() -> None:
    def refused(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "squeue: error: Unable to contact slurm controller\n")

    assert queue.spot("7104", refused) is None


def test_lines_that_are_not_squeues_are_skipped_and_nothing_raises() -> None:
    bodies = [c.body for c in CAPTURES]
    assert_total(queue.parse_pending, bodies)
    hostile = ("7104|debug;rm|10|N/A|Priority\n7105|debug|1e9|N/A|Priority\n../7|debug|1|N/A|Priority\n"
               "7106|debug|5|\x1b[2J|Priority\n")
    assert list(queue.parse_pending(hostile)) == ["7106"]
    assert queue.parse_pending(hostile)["7106"].start is None
