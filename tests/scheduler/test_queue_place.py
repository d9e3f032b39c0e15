"""A pending job's place in its queue, counted from pending jobs (the parsing of squeue's text
is tested on real captures in tests/captures/test_squeue_pending.py)."""

from __future__ import annotations

from clusterkit.scheduler.slurm.queue import Pending, Spot, spot_in


def job(job_id: str, priority: int, reason: str = "Priority", parts: str = "debug",
        start: str | None = None) -> Pending:
    return Pending(job_id, frozenset(parts.split(",")), priority, start, reason)


def table(*jobs: Pending) -> dict[str, Pending]:
    return {j.job_id: j for j in jobs}


def test_the_place_counts_higher_priorities_and_older_ties_of_the_same_partition() -> None:
    q = table(job("10", 500, "Resources"), job("11", 400), job("12", 400), job("13", 900, parts="high"),
              job("14", 100, start="2026-12-06T04:10:00"), job("15", 999, "Dependency"), job("16", 998, "JobHeldUser"))
    assert spot_in("10", q) == Spot(1, 4, ("debug",), None)
    assert spot_in("11", q) == Spot(2, 4, ("debug",), None)     # the same priority: the older id first
    assert spot_in("12", q) == Spot(3, 4, ("debug",), None)
    assert spot_in("14", q) == Spot(4, 4, ("debug",), "2026-12-06T04:10:00")
    assert spot_in("13", q) == Spot(1, 1, ("high",), None)      # another partition's queue
    assert spot_in("15", q) is None and spot_in("16", q) is None and spot_in("99", q) is None


def test_a_job_of_two_partitions_competes_in_both() -> None:
    q = table(job("20", 50, parts="debug,high"), job("21", 60, parts="high"), job("22", 70, parts="debug"))
    spot = spot_in("20", q)
    assert spot == Spot(3, 3, ("debug", "high"), None)
    assert spot.worded() == "3rd of 3 pending in debug,high"
    assert Spot(1, 12, ("gpu",), "2026-12-06T04:10:00").worded() == \
        "1st of 12 pending in gpu, Slurm's start estimate 2026-12-06T04:10:00"
    assert [Spot(n, 30, ("p",), None).worded().split()[0] for n in (2, 3, 4, 11, 12, 13, 21, 22, 23)] == \
        ["2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd"]
