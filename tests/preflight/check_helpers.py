"""Running the preflight script on the lab's node profiles with a real shell, and judging its
output (``tests/preflight/test_checks.py``, ``tests/preflight/test_check_captures.py``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from clusterkit.config.schema import Storage
from clusterkit.preflight.catalogue import Expectations, StorageExpect
from clusterkit.preflight.engine import (
    MULTI,
    CheckResult,
    CheckSet,
    Status,
    evaluate,
)

PROFILES = Path(__file__).resolve().parents[1] / "sshlab" / "profiles"


def storage(path: str, kind: str, **kw: Any) -> StorageExpect:
    """A site's ``storage:`` entry as the checks get it (``writable``: used for checkpoints)."""
    use = ["checkpoints"] if kw.pop("writable", False) else []
    return StorageExpect.from_config(Storage(path=path, type=kind, use=use, **kw))


LUSTRE = storage("/lustre/scratch", "lustre", min_free_gb=0.001, writable=True, timeout_s=1.5)
HOME = storage("/home", "nfs")


def expect(stage: str = MULTI, **kw) -> Expectations:  # type: ignore[no-untyped-def]
    base = dict(stage=stage, gpus_per_node=8, gpu_model="H100", driver_min="535.104", cuda_min="12.4",
                fabric="infiniband", hcas=tuple(f"mlx5_{i}" for i in range(8)), port_rate_gbps=400,
                storage=(LUSTRE, HOME), command_timeout_s=9)
    base.update(kw)
    return Expectations(**base)  # type: ignore[arg-type]


def run_on_profile(check_set: CheckSet, profile: str, tmp_path: Path) -> tuple[str, int]:
    """Run the set's script as a lab node with ``profile`` would; returns (stdout, rc)."""
    node = tmp_path / profile
    if not node.exists():
        shutil.copytree(PROFILES / profile / "root", node / "root", symlinks=True)
    env = dict(os.environ, PATH=f"{PROFILES / profile / 'bin'}:{os.environ['PATH']}",
               CLUSTERKIT_SYSROOT=str(node / "root"))
    proc = subprocess.run(["sh", "-c", check_set.script()], env=env, capture_output=True, text=True, timeout=60)
    return proc.stdout, proc.returncode


def judge(check_set: CheckSet, out: str) -> dict[str, CheckResult]:
    return {r.check + (":" + r.target if r.target else ""): r for r in evaluate(check_set, out)}


def results(check_set: CheckSet, profile: str, tmp_path: Path) -> dict[str, CheckResult]:
    out, _ = run_on_profile(check_set, profile, tmp_path)
    return judge(check_set, out)


class Judged(NamedTuple):
    """One check set and its results on several profiles (:func:`judge_profiles`)."""

    check_set: CheckSet
    by_profile: dict[str, dict[str, CheckResult]]
    outs: dict[str, str]   # each profile's script output


def judge_profiles(check_set: CheckSet, profiles: Sequence[str], tmp_path: Path) -> Judged:
    """:func:`results` on each profile, four scripts at a time: a script mostly waits (2 s between
    its two reads of the error counters), so side by side they take the time of a few."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        outs = list(pool.map(lambda profile: run_on_profile(check_set, profile, tmp_path)[0], profiles))
    return Judged(check_set, {profile: judge(check_set, out) for profile, out in zip(profiles, outs, strict=True)},
                  dict(zip(profiles, outs, strict=True)))


def failures(res: dict[str, CheckResult]) -> dict[str, str]:
    return {k: r.message for k, r in res.items() if r.status is Status.FAIL}
