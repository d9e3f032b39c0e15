"""The job's own environment and setup steps on the Slurm testbed, with the real launchers.

Every rank of torchrun, srun, deepspeed (--no_ssh) and accelerate on 4 nodes sees the value its
own node expanded from ``${SLURM_NODEID}``, and literal values byte for byte; ``--node-setup``
runs once on every node; a failing ``--setup`` ends the job FAILED with its reason, starts no
rank and is not requeued, and ``doctor`` names the step.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .conftest import CK

HERE = Path(__file__).parent
RANK = HERE / "job_env_rank.py"
LITERAL = "$(touch /tmp/ck-i19-pwned) `id` 'q' \"dq\" \\ $HOME x"


def _submitted_id(out: str) -> str:
    m = re.search(r"Submitted job (\d+)", out)
    assert m, f"no job id in output:\n{out}"
    return m.group(1)


@pytest.mark.parametrize("launcher", ["torchrun", "srun", "deepspeed", "accelerate"])
def test_every_rank_sees_its_own_nodes_value_on_four_nodes(cli: CK, tmp_path: Path, launcher: str) -> None:
    marks = tmp_path / "marks"
    marks.mkdir(mode=0o777)
    envfile = tmp_path / "vars.env"
    envfile.write_text("# literal, no shell\nFROM_FILE=" + LITERAL + "\n")
    run_dir = cli.runs / launcher
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "4", "--gpus-per-node", "2",
               "--launcher", launcher, "--out", str(run_dir), "--wait",
               "--env", f"MARK_DIR={marks}", "--env", "PER_NODE=/tmp/cache_${SLURM_NODEID}",
               "--env", f"LITERAL={LITERAL}", "--env-file", str(envfile), "--env", "NCCL_DEBUG=INFO",
               "--setup", "export FROM_SETUP=batch-shell", "--node-setup", f'echo "$SLURMD_NODENAME" >> {marks}/nodes',
               "--", "python", str(RANK), env=cli.env(DS_ACCELERATOR="cpu"), timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = [json.loads(p.read_text()) for p in sorted(marks.glob("rank*.json"))]
    assert sorted(int(r["RANK"]) for r in ranks) == list(range(8)), ranks
    assert {r["SLURMD_NODENAME"] for r in ranks} == {"node1", "node2", "node3", "node4"}
    for r in ranks:  # node<k> is the allocation's (k-1)-th node: its own SLURM_NODEID
        assert r["PER_NODE"] == f"/tmp/cache_{int(r['SLURMD_NODENAME'][4:]) - 1}", r
        assert r["PER_NODE"] == f"/tmp/cache_{r['SLURM_NODEID']}", r
        assert (r["LITERAL"], r["FROM_FILE"], r["FROM_SETUP"], r["NCCL_DEBUG"]) == (
            LITERAL, LITERAL, "batch-shell", "INFO"), r
    assert not Path("/tmp/ck-i19-pwned").exists()
    assert sorted((marks / "nodes").read_text().split()) == ["node1", "node2", "node3", "node4"]


def test_failing_setup_ends_the_job_before_any_rank_and_is_not_requeued(cli: CK, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir(mode=0o777)
    run_dir = cli.runs / "setup-fails"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--launcher", "torchrun", "--set", "max_restarts=2", "--out", str(run_dir), "--wait",
               "--env", f"MARK_DIR={marks}", "--setup", "true", "--setup", "echo checking data; exit 4",
               "--", "python", str(RANK))
    job = _submitted_id(proc.stdout)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"Job {job} FAILED (exit code 4)" in proc.stdout
    st = cli.status(job)
    assert (st["state"], st["reason"]) == ("FAILED", "setup step 2 failed (exit 4)"), st
    assert not list(marks.glob("rank*.json"))
    batch = (run_dir / "logs" / f"slurm-{job}.out").read_text()
    assert "(restart 0 of at most 2)" in batch and "(restart 1 " not in batch
    held = cli.bed.run("scontrol", "show", "job", job).stdout
    assert "Restarts=0" in held, held
    doc = cli("doctor", job, timeout=60)
    assert "setup step 2 failed (exit 4): the job ended before any rank started" in doc.stdout + doc.stderr


def test_a_setup_file_with_set_e_leaves_the_job_shell_its_options_and_the_supervisor_ends_the_job(
        cli: CK, tmp_path: Path) -> None:
    """A centre's ``setup_env.sh`` runs ``set -eux`` (issue 40): the job script takes its own options
    back after the step, so a failing training command ends through the supervisor (its result, its
    cause); the job's name holds ':', as Slurm allows."""
    setup = tmp_path / "setup_env.sh"
    setup.write_text("set -eux\nexport FROM_SETUP=yes\n")
    train = tmp_path / "fail7.py"
    train.write_text("import os, sys\nsys.exit(7 if os.environ.get('FROM_SETUP') == 'yes' else 1)\n")
    run_dir = cli.runs / "set-e"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--launcher", "srun", "--job-name", "centre:set-e", "--set", "max_restarts=0", "--out", str(run_dir),
               "--wait", "--setup", f". {setup}", "--setup", 'echo "after setup: $-"', "--", "python", str(train))
    job = _submitted_id(proc.stdout)
    # rank 0 ends 7 and srun ends the other (15): the supervisor ran the end and wrote the result
    assert proc.returncode in (7, 15) and f"Job {job} FAILED (exit code {proc.returncode})" in proc.stdout, (
        proc.stdout + proc.stderr)
    assert re.search(r"node\d: task \d: Exited with exit code 7", proc.stdout), proc.stdout
    st = cli.status(job)
    assert (st["state"], st["name"]) == ("FAILED", "centre:set-e"), st
    batch = (run_dir / "logs" / f"slurm-{job}.out").read_text()
    seen = [ln.split(": ", 1)[1] for ln in batch.splitlines() if ln.startswith("after setup: ")]
    assert len(seen) == 1 and not {"e", "x"} & set(seen[0]), batch
    assert "+ echo 'after setup" not in batch   # no xtrace after the step that turned it on
    held = cli.bed.run("scontrol", "show", "job", job).stdout
    assert "JobName=centre:set-e" in held, held


@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_run_time_placeholders_are_each_nodes_own_values(cli: CK, tmp_path: Path, launcher: str) -> None:
    """``{ck:NAME}`` in the command and a launcher argument (issue 40): every rank gets its own
    node's index and name, the job's id and run directory; the rest is literal."""
    marks = tmp_path / "marks"
    marks.mkdir(mode=0o777)
    rank = tmp_path / "argv.py"
    rank.write_text("import json, os, pathlib, sys\n"
                    "r = os.environ.get('RANK') or os.environ['SLURM_PROCID']\n"
                    "env = {k: os.environ.get(k) for k in ('SLURMD_NODENAME', 'SLURM_NODEID')}\n"
                    f"pathlib.Path({str(marks)!r}, f'argv{{r}}.json').write_text(json.dumps([sys.argv[1:], env]))\n")
    run_dir = cli.runs / f"ph-{launcher}"
    extra = ["--launcher-arg=--log-dir={ck:run_dir}/tr-{ck:job_id}-{ck:node_id}"] if launcher == "torchrun" else []
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--launcher", launcher, "--out", str(run_dir), "--wait", *extra,
               "--", "python", str(rank), "--save", "ckpt/{ck:job_id}", "--where", "{ck:node_name}:{ck:node_rank}",
               "--restart", "{ck:restart}", "--lit", "$SLURM_JOB_ID {lr}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _submitted_id(proc.stdout)
    got = [json.loads(p.read_text()) for p in sorted(marks.glob("argv*.json"))]
    assert len(got) == 2, got
    for argv, env in got:
        assert argv == ["--save", f"ckpt/{job}", "--where", f"{env['SLURMD_NODENAME']}:{env['SLURM_NODEID']}",
                        "--restart", "0", "--lit", "$SLURM_JOB_ID {lr}"], (argv, env)
    assert {env["SLURMD_NODENAME"] for _, env in got} == {"node1", "node2"}
    if launcher == "torchrun":
        assert (run_dir / f"tr-{job}-0").is_dir() and (run_dir / f"tr-{job}-1").is_dir()
