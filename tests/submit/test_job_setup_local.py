"""Setup steps and the job's environment on a local site, run for real (submitit's local executor,
torchrun): a failing ``--setup`` ends the job with its reason and starts no rank; what the steps
export reaches the rank, and ``${CK_*}`` is expanded in the job."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import CLI
from tests.submit.conftest import submitted_job_id

pytest.importorskip("torch")  # torchrun is the local site's launcher
pytestmark = pytest.mark.torch




RANK = ("import os, pathlib\n"
        "out = pathlib.Path(os.environ['MARK_DIR'])\n"
        "(out / f\"rank{os.environ['RANK']}.json\").write_text(__import__('json').dumps(dict(os.environ)))\n")


def test_failing_setup_step_ends_the_job_before_any_rank(local_ck: CLI, tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    run = tmp_path / "run"
    proc = local_ck("submit", "--site", "local", "--gpus-per-node", "1", "--out", str(run),
                    "--env", f"MARK_DIR={tmp_path}", "--setup", f"touch {tmp_path}/step1",
                    "--setup", "echo preparing; exit 3", "--setup", f"touch {tmp_path}/step3",
                    "--", "python", str(script))
    job = submitted_job_id(proc.out)
    assert proc.code == 3 and f"Job {job} FAILED (exit code 3)" in proc.out, proc.out + proc.err
    assert (run / f"{job}.reason").read_text() == "setup step 2 failed (exit 3)\n"
    assert (run / f"{job}.result").read_text() == "3\n"
    assert (tmp_path / "step1").exists() and not (tmp_path / "step3").exists()
    assert not list(tmp_path.glob("rank*.json"))          # no rank started
    assert "clusterkit: setup step 2 failed (exit 3)" in (run / f"{job}_0_log.err").read_text()


def test_setup_exports_and_job_env_reach_the_rank(local_ck: CLI, tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    envfile = tmp_path / "vars.env"
    envfile.write_text("# from a file\nFROM_FILE=$(not run) `nor this`\nWANDB_MODE=offline\n")
    run = tmp_path / "run"
    proc = local_ck("submit", "--site", "local", "--gpus-per-node", "1", "--out", str(run),
                    "--env-file", str(envfile), "--env", f"MARK_DIR={tmp_path}",
                    "--env", "PER_JOB=/tmp/cache_${CK_JOB_ID}", "--env", "NCCL_DEBUG=INFO",
                    "--setup", "export FROM_SETUP=yes", "--node-setup", f"echo once >> {tmp_path}/node-setup",
                    "--", "python", str(script))
    assert proc.code == 0, proc.out + proc.err
    job = submitted_job_id(proc.out)
    env = json.loads((tmp_path / "rank0.json").read_text())
    assert env["FROM_FILE"] == "$(not run) `nor this`" and env["WANDB_MODE"] == "offline"
    assert env["PER_JOB"] == f"/tmp/cache_{job}" and env["NCCL_DEBUG"] == "INFO"
    assert env["FROM_SETUP"] == "yes"
    assert (tmp_path / "node-setup").read_text() == "once\n"
    # the checkpoint cadence the job states (plan.json) is what the rank reads
    cadence = json.loads((run / "plan.json").read_text())["cadence"]
    assert env["CK_CHECKPOINT_INTERVAL_S"] == str(cadence["interval_s"]) and cadence["gpus"] == 1


def test_setup_file_turning_on_set_e_does_not_change_the_job_shell(local_ck: CLI, tmp_path: Path) -> None:
    """A centre's ``setup_env.sh`` that runs ``set -eux``: the job's own shell keeps its options,
    so a training command that fails still ends with its result and reason (issue 40)."""
    script = tmp_path / "fail7.py"
    script.write_text("import os, sys\nsys.exit(7 if os.environ['FROM_SETUP'] == 'yes' else 1)\n")
    setup = tmp_path / "setup_env.sh"
    setup.write_text("set -eux\nshopt -s failglob\nexport FROM_SETUP=yes CUDA_VISIBLE_DEVICES=0\n")
    run = tmp_path / "run"
    proc = local_ck("submit", "--site", "local", "--gpus-per-node", "1", "--out", str(run),
                    "--setup", f". {setup}",
                    "--setup", "echo \"second step sees: $-\"; if shopt -q failglob; then echo failglob-stayed; fi",
                    "--", "python", str(script))
    job = submitted_job_id(proc.out)
    # torchrun ends 1 when its rank ends 7; the job wrote its result and doctor's cause
    assert proc.code == 1 and f"Job {job} FAILED (exit code 1)" in proc.out, proc.out + proc.err
    assert "rank 0 failed first (exit code 7)" in proc.out, proc.out
    assert (run / f"{job}.result").read_text() == "1\n"
    out = (run / f"{job}_0_log.out").read_text()
    seen = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("second step sees: ")]
    assert len(seen) == 1 and not {"e", "x"} & set(seen[0]), out
    assert "failglob-stayed" not in out
    err = (run / f"{job}_0_log.err").read_text()
    assert "second step sees" not in err   # no xtrace of the second step
    # what a sourced file does to CUDA_VISIBLE_DEVICES is not seen at render time: the job says it
    before = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
    assert (before == "0" or f"warning: the setup steps changed CUDA_VISIBLE_DEVICES ({before} -> 0); "
            "--gpus-per-node decides" in err), err


ARGV = ("import json, os, pathlib, sys\n"
        "out = pathlib.Path(os.environ['MARK_DIR'])\n"
        "(out / f\"argv{os.environ['RANK']}.json\").write_text(json.dumps(sys.argv[1:]))\n")


def test_run_time_placeholders_reach_the_rank_as_values(local_ck: CLI, tmp_path: Path) -> None:
    """``{ck:NAME}`` in the command and a launcher argument (issue 40), in a real local run."""
    script = tmp_path / "argv.py"
    script.write_text(ARGV)
    run = tmp_path / "run"
    proc = local_ck("submit", "--site", "local", "--gpus-per-node", "1", "--out", str(run),
                    "--env", f"MARK_DIR={tmp_path}", "--launcher-arg=--log-dir={ck:run_dir}/tr-{ck:job_id}",
                    "--", "python", str(script), "--save", "ckpt/{ck:job_id}", "--node-id={ck:node_id}",
                    "--host", "{ck:node_name}", "--restart", "{ck:restart}", "--lit", "$CK_JOB_ID $(id) {ck:job_id")
    assert proc.code == 0, proc.out + proc.err
    job = submitted_job_id(proc.out)
    argv = json.loads((tmp_path / "argv0.json").read_text())
    assert argv == ["--save", f"ckpt/{job}", "--node-id=0", "--host", os.uname().nodename, "--restart", "0",
                    "--lit", "$CK_JOB_ID $(id) {ck:job_id"], argv
    assert (run / f"tr-{job}").is_dir()   # torchrun's --log-dir, from the launcher argument
