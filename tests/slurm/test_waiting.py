"""``submit --wait`` and ``--follow`` on a queued job: its state and Slurm's pending reason
(squeue's ``%r``) as a line each time they change, never once per poll.  The job waits on an
earlier one (``--after``), so Slurm gives the reason ``Dependency``.  Before: ``PENDING`` once,
then nothing until the job ran."""

from __future__ import annotations

import itertools
import re
import shlex

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
        # the first job runs until the test has seen the second one wait on it (at most 180 s), not
        # for a guess of how long the second one's submit and first look take
        go = cli.runs / f"go{how}"
        first = cli(*BASE, "--out", str(cli.runs / f"first{how}"), "--", "bash", "-c",
                    f"for i in $(seq 900); do [ -e {shlex.quote(str(go))} ] && exit 0; sleep 0.2; done; exit 1")
        assert first.code == 0, first.err
        job1 = _submitted_id(first.out)
        waiter = cli.popen(*BASE, "--after", f"{job1}:any", "--out", str(cli.runs / f"after{how}"), how, "--",
                           "echo", "done")
        seen: list[str] = []
        try:
            assert waiter.stderr is not None
            for line in waiter.stderr:   # a pipe: a line per change
                seen.append(line)
                if "PENDING, reason: Dependency" in line:
                    break
        finally:
            go.touch()
        out, err = waiter.communicate(timeout=240)
        err = "".join(seen) + err
        assert waiter.returncode == 0, out + err
        job = _submitted_id(out)
        said = _lines(err, job)
        pending = [ln for ln in said if " PENDING" in ln]
        # Slurm may not have judged the dependency at the first look (reason None: the queue place
        # is said then); the reason is said once it is Dependency
        assert any("PENDING, reason: Dependency" in ln for ln in pending), said
        # one line per change: the same state and reason never twice in a row
        keys = [re.sub(r" \(after \d+:\d\d\)$", "", ln) for ln in said]
        assert all(a != b for a, b in itertools.pairwise(keys)), said
        assert len(pending) <= 3, said
        assert f"Job {job} COMPLETED (exit code 0)" in out, out


def test_wait_and_status_say_the_place_in_the_queue_behind_a_job_holding_every_gpu(cli: CK) -> None:
    """A job that holds all 4 nodes' 8 GPUs keeps the next one pending (Resources): ``--wait``
    says its place (the first of one pending job in its partition), so does ``status``; the
    test waits on those states, then cancels the first job, and the second runs."""
    hog = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "4", "--gpus-per-node", "8",
              "--launcher", "srun", "--out", str(cli.runs / "hog"), "--", "sleep", "600")
    assert hog.code == 0, hog.err
    hog_id = _submitted_id(hog.out)
    cli.wait_for(hog_id, lambda s: s["state"] == "RUNNING")
    waiter = cli.popen(*BASE, "--out", str(cli.runs / "behind"), "--wait", "--", "echo", "done")
    try:
        seen: list[str] = []
        assert waiter.stderr is not None
        for line in waiter.stderr:   # a pipe: a line per change
            seen.append(line)
            if re.search(r"PENDING, reason: \w+, 1st of 1 pending in \w+", line):
                break
        placed = re.search(r"clusterkit: job (\d+) PENDING, reason: (\w+), 1st of 1 pending in (\w+)", seen[-1])
        assert placed, seen
        job = placed.group(1)
        st = cli.status(job)
        assert st["state"] == "PENDING" and st["queue"]["position"] == 1 and st["queue"]["pending"] == 1, st
        assert st["queue"]["partitions"] == [placed.group(3)]
        shown = cli("status", job)
        assert shown.code == 0 and f"  queue: 1st of 1 pending in {placed.group(3)}" in shown.out, shown.out
    finally:
        cli.bed.run("scancel", hog_id, check=False)
    out, err = waiter.communicate(timeout=240)
    assert waiter.returncode == 0, out + err
    assert f"Job {job} COMPLETED (exit code 0)" in out, out
    # then it ran: RUNNING where a poll caught it running (an `echo` may be done before the next poll)
    assert re.search(rf"clusterkit: job {job} (RUNNING|COMPLETED)", err), err
