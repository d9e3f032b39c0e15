"""CK_CHECKPOINT_DIR is where a run saves and resumes from: a symbolic link another user plants in
its place (in shared checkpoint storage) must not send the run's checkpoints, or what it loads,
anywhere else.  Real bash on the rendered script with the stand-ins of tests/jobscript."""

from __future__ import annotations

import getpass
import json
import secrets
import shutil
from pathlib import Path

from tests.jobscript.conftest import job  # noqa: F401  (the fixture)
from tests.jobscript.harness import JOB_ID


def _base(run_dir: Path) -> Path:
    return Path(json.loads((run_dir / "plan.json").read_text())["checkpoint_dir"])


def test_a_checkpoint_dir_planted_as_a_symlink_stops_the_job(job, tmp_path: Path) -> None:  # noqa: F811
    jname = f"ck-hostile-{secrets.token_hex(6)}"
    j = job("--job-name", jname)
    name = f"{jname}-{JOB_ID}"   # the run name without --run-name: the job name and its job id
    base = _base(j.run_dir) / getpass.getuser()   # <storage>/checkpoints/<user>/<run name>
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir()
    (base / name).symlink_to(elsewhere)
    try:
        j.start()
        assert j.wait() == 1, j.log()
    finally:
        (base / name).unlink()
    assert j.rank_pids() == []
    assert f"{base / name} is a symbolic link" in j.reason(), j.reason()


def test_a_real_checkpoint_dir_runs(job, tmp_path: Path) -> None:  # noqa: F811
    jname = f"ck-hostile-{secrets.token_hex(6)}"
    j = job("--job-name", jname, JS_RANK_RC="0")
    name = f"{jname}-{JOB_ID}"
    try:
        j.start()
        j.await_ranks()
        j.touch("finish")
        assert j.wait() == 0, j.log()
    finally:
        shutil.rmtree(_base(j.run_dir) / getpass.getuser() / name, ignore_errors=True)
