"""Checkpoint capacity (clusterkit/job/checkpoint.py, preflight/space.py, ``plan
--keep-checkpoints``): the modelled checkpoint size times the number kept against the checkpoint
directory's free space and inodes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from clusterkit.job.checkpoint import BYTES_PER_PARAM, checkpoint_bytes, judge
from clusterkit.preflight.space import free


def test_a_405b_checkpoint_is_what_the_model_states_hold() -> None:
    # 2 (16-bit weights) + 4 (fp32 master) + 8 (Adam's moments) bytes per parameter
    assert BYTES_PER_PARAM == 14 and checkpoint_bytes(405 * 10**9) == 5_670_000_000_000


def test_space_and_inodes_each_can_be_short() -> None:
    size = checkpoint_bytes(10**9)                      # 14 GB
    ok = judge("/ck", 10**9, 8, 2, free_bytes=10 * size, free_inodes=10**6)
    assert ok.verdict == "ok" and ok.need_bytes == 2 * size and ok.need_files == 18
    space = judge("/ck", 10**9, 8, 2, free_bytes=size, free_inodes=10**6)
    assert space.verdict == "too-small" and "14.0 GB free" in space.message and "does not fit in /ck" in space.message
    inodes = judge("/ck", 10**9, 1024, 3, free_bytes=100 * size, free_inodes=3000)
    assert inodes.verdict == "too-small" and "3,000 inodes free for 3,075 files" in inodes.message
    tight = judge("/ck", 10**9, 8, 2, free_bytes=int(2.05 * size), free_inodes=10**6)
    assert tight.verdict == "tight"
    unknown = judge("/ck", 10**9, 8, 2, None, None, "statvfs /ck: Permission denied")
    assert unknown.verdict == "unknown" and "Permission denied" in unknown.message


def test_a_directory_not_made_yet_is_measured_on_its_parent(tmp_path: Path) -> None:
    got = free(str(tmp_path / "checkpoints" / "not" / "yet"))
    assert not isinstance(got, str)
    st = os.statvfs(tmp_path)
    assert got[2] == str(tmp_path) and abs(got[0] - st.f_bavail * st.f_frsize) < 1 << 30
    # storage that is not mounted here is not judged by the disk it would sit on
    assert free("/lustre-not-here/scratch/checkpoints", "/lustre-not-here/scratch") == \
        "/lustre-not-here/scratch is not on this machine"


def test_plan_warns_when_the_checkpoints_do_not_fit(ck) -> None:  # type: ignore[no-untyped-def]
    # 1.5T parameters: 21 TB a checkpoint, more than the testbed's /tmp holds
    res = ck("plan", "--site", "testbed", "--model-params", "1.5T", "--keep-checkpoints", "3", "--json")
    assert res.code == 0, res.err
    cap = json.loads(res.out)["checkpoint_capacity"]
    assert cap["verdict"] == "too-small" and cap["keep"] == 3 and cap["need_bytes"] == 3 * 14 * 15 * 10**11
    assert res.err == ""                                   # --json: the document says it
    text = ck("plan", "--site", "testbed", "--model-params", "1.5T", "--keep-checkpoints", "3")
    assert text.code == 0 and "does not fit in" in text.err and text.err.count("\n") == 1, text.err
    small = ck("plan", "--site", "testbed", "--model-params", "1M")
    assert small.code == 0 and "checkpoints: 2 x" in small.out + small.err, small.out
    bad = ck("plan", "--site", "testbed", "--model-params", "1M", "--keep-checkpoints", "0")
    assert bad.code == 2 and "--keep-checkpoints 0" in bad.err
