"""``submit --chain N`` and ``--run-name`` on the Slurm testbed, for real.

The training stand-in (``chain_train.py``) resumes from ``$CK_CHECKPOINT_DIR``, trains 5 steps
and saves after each.  A chain of 3 shares one run name, so member 3 starts from member 2's
step; a member that fails in the user's code (doctor's verdict ``user-code``) cancels the rest.
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest

from .conftest import CK, REPO

#: the user the jobs run as: CK_CHECKPOINT_DIR is <storage>/checkpoints/<user>/<run name>
USER = pwd.getpwuid(os.getuid()).pw_name

STANDIN = "tests/slurm/chain_train.py"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """The testbed site with its checkpoint storage under tmp_path (shared: every node is this host)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    path = tmp_path / "testbed-chain.yaml"
    path.write_text(f"name: testbed-chain\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\n"
                    f"storage:\n  - {{path: {shared}, type: local, shared: true, use: [checkpoints]}}\n"
                    f"  - {{path: {tmp_path}, type: local, shared: true}}\n")
    return path


def _submit_chain(cli: CK, site: Path, name: str, *extra: str) -> dict:
    proc = cli("submit", "--site", str(site), "--launcher", "srun", "--gpus-per-node", "1",
               "--set", "cpus_per_task=1", "--job-name", name, "--chain", "3", "--out", str(cli.runs / name),
               "--json", *extra, "--", "python", STANDIN)
    assert proc.code == 0, proc.err
    return json.loads(proc.out)


def _log(cli: CK, name: str, member: int, job: str) -> str:
    path = cli.runs / name / f"member-{member}" / "logs" / f"slurm-{job}.out"
    return path.read_text() if path.exists() else f"(no {path})"


def test_chain_of_three_each_resumes_from_the_last_and_shares_one_run(cli: CK, site: Path) -> None:
    cli.bed.wait_idle()
    out = _submit_chain(cli, site, "chain3")
    ids = [m["job_id"] for m in out["chain"]]
    assert len(ids) == 3 and len(set(ids)) == 3
    run = f"chain3-{ids[0]}"   # the first member's default run name, shared by all
    assert {m["run_name"] for m in out["chain"]} == {run}
    assert (cli.runs / "chain3" / "member-1" / "chain.ids").read_text().split() == ids
    for job in ids:
        cli.wait_for(job, lambda s: s["state"] == "COMPLETED", timeout=240, what="COMPLETED")
    ckpt = site.parent / "shared" / "checkpoints" / USER / run
    started = {j: json.loads((ckpt / f"started.{j}.json").read_text()) for j in ids}
    ended = {j: json.loads((ckpt / f"ended.{j}.json").read_text()) for j in ids}
    assert [started[j]["resumed_step"] for j in ids] == [0, 5, 10], started
    # member 3 started from the step member 2 saved last
    assert started[ids[2]]["resumed_step"] == ended[ids[1]]["step"] == 10
    assert ended[ids[2]]["step"] == 15 and json.loads((ckpt / "ckpt.json").read_text())["job"] == ids[2]
    assert all(s["run"] == run for s in started.values())
    # each waited for the one before (and resumed from its step, above)
    for k in (1, 2):
        script = (cli.runs / "chain3" / f"member-{k + 1}" / "job.sbatch").read_text()
        assert f"--dependency=afterany:{ids[k - 1]}" in script


def test_a_user_code_failure_in_the_first_member_cancels_the_rest(cli: CK, site: Path) -> None:
    cli.bed.wait_idle()
    proc = cli("submit", "--site", str(site), "--launcher", "srun", "--gpus-per-node", "1",
               "--set", "cpus_per_task=1", "--job-name", "chainfail", "--chain", "3",
               "--out", str(cli.runs / "chainfail"), "--json", "--", "python", STANDIN, "--fail")
    assert proc.code == 0, proc.err
    ids = [m["job_id"] for m in json.loads(proc.out)["chain"]]
    first = cli.wait_for(ids[0], lambda s: s["state"] == "FAILED", timeout=240, what="FAILED")
    assert first["exit_code"] == 1, first
    for job in ids[1:]:
        cli.wait_for(job, lambda s: s["state"] == "CANCELLED", timeout=60, what="CANCELLED")
    log = _log(cli, "chainfail", 1, ids[0])
    assert "chain: doctor says user-code, which a restart cannot fix: the chain stops here" in log, log
    assert f"chain: cancelling the later members: {ids[1]} {ids[2]}" in log, log
    assert (cli.runs / "chainfail" / "member-1" / f"{ids[0]}.unfixable").read_text().strip() == "user-code"
    ckpt = site.parent / "shared" / "checkpoints" / USER / f"chainfail-{ids[0]}"
    assert sorted(p.name for p in ckpt.glob("started.*.json")) == [f"started.{ids[0]}.json"]


def test_a_run_name_written_by_a_live_job_is_refused_and_resumes_after_it(cli: CK, site: Path) -> None:
    cli.bed.wait_idle()
    base = ("submit", "--site", str(site), "--launcher", "srun", "--gpus-per-node", "1", "--set", "cpus_per_task=1",
            "--run-name", "lm-a", "--json")
    go = cli.runs / "runa1-go"   # the first job runs until the test has tried the name twice
    first = cli(*base, "--job-name", "runa", "--out", str(cli.runs / "runa1"), "--", "python", STANDIN,
                "--steps", "25", "--hold", str(go))
    assert first.code == 0, first.err
    job1 = json.loads(first.out)["job_id"]
    try:
        cli.wait_for(job1, lambda s: s["state"] == "RUNNING", timeout=120, what="RUNNING")
        again = cli(*base, "--job-name", "runa", "--out", str(cli.runs / "runa2"), "--", "python", STANDIN)
        assert again.code == 2, again.err
        assert f"--run-name 'lm-a': job {job1} (RUNNING) writes run lm-a now" in again.err, again.err
        assert "Traceback" not in again.err and not (cli.runs / "runa2").exists()
        after = cli(*base, "--after", f"{job1}:any", "--job-name", "runa", "--out", str(cli.runs / "runa3"), "--",
                    "python", STANDIN)
        assert after.code == 0, after.err
    finally:
        go.touch()
    job2 = json.loads(after.out)["job_id"]
    cli.wait_for(job2, lambda s: s["state"] == "COMPLETED", timeout=240, what="COMPLETED")
    ckpt = site.parent / "shared" / "checkpoints" / USER / "lm-a"
    ended1 = json.loads((ckpt / f"ended.{job1}.json").read_text())
    assert json.loads((ckpt / f"started.{job2}.json").read_text())["resumed_step"] == ended1["step"] == 25
