"""``submit --wait`` and ``--follow`` on a queued job: its state and Slurm's pending reason
(squeue's ``%r``) as a line each time they change, never once per poll.  The job waits on an
earlier one (``--after``), so Slurm gives the reason ``Dependency``.  Before: ``PENDING`` once,
then nothing until the job ran."""

from __future__ import annotations

import itertools
import re

from .conftest import CK

BASE = ("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
        "--launcher", "srun")


def _submitted_id(out: str) -> str:
    m = re.search(r"Submitted job (\d+)", out)
    assert m, out
    return m.group(1)


def _lines(err: str, job: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith(f"clusterkit: job {job} ")]


def test_wait_and_follow_say_the_pending_reason_when_it_changes(cli: CK) -> None:
    for how in ("--wait", "--follow"):
        first = cli(*BASE, "--out", str(cli.runs / f"first{how}"), "--", "sleep", "12")
        assert first.code == 0, first.err
        job1 = _submitted_id(first.out)
        proc = cli(*BASE, "--after", f"{job1}:any", "--out", str(cli.runs / f"after{how}"), how, "--",
                   "echo", "done", timeout=240)
        assert proc.code == 0, proc.out + proc.err
        job = _submitted_id(proc.out)
        said = _lines(proc.err, job)
        pending = [ln for ln in said if " PENDING" in ln]
        assert pending and "PENDING, reason: Dependency" in pending[0], said
        # one line per change: the same state and reason never twice in a row
        keys = [re.sub(r" \(after \d+:\d\d\)$", "", ln) for ln in said]
        assert all(a != b for a, b in itertools.pairwise(keys)), said
        assert len(pending) <= 3, said
        assert f"Job {job} COMPLETED (exit code 0)" in proc.out, proc.out
