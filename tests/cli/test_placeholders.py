"""``{ck:NAME}`` in the training command and ``--launcher-arg`` words (issue 40): each replaced by
the job's value where the launcher starts, by string replacement (the value is data), everything
else literal; unknown names and values a launcher cannot give per node are refused.  The launch
body is run by real bash here; tests/slurm and tests/submit run it in real jobs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, shared_site

HOSTILE_DIR = "/runs/it's & \\1 $(id) `id`"


def _body(text: str) -> str:
    m = re.search(r"bash -c ('(?:[^']|'\"'\"')*')", text)
    assert m, text
    return subprocess.run(["bash", "-c", f"printf %s {m.group(1)}"], capture_output=True, text=True,
                          check=True).stdout


def _replace(body: str, words: list[str], **env: str) -> list[str]:
    """Run the body's replacement lines, as the node runs them, on ``words``; what "$@" becomes."""
    head = body[body.index("ck_args=()"):body.index('set -- "${ck_args[@]}"; ') + len('set -- "${ck_args[@]}"; ')]
    proc = subprocess.run(["bash", "-c", head + 'printf "%s\\0" "$@"', "clusterkit-launch", *words],
                          capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin", **env})
    return proc.stdout.split("\0")[:-1]


def test_command_placeholders_are_replaced_where_the_launcher_starts_and_nothing_else(ck, tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = ["python", "train.py", "--save", "ckpt/{ck:job_id}", "--tb", "tb/{ck:node_name}-{ck:node_rank}",
               "--restart={ck:restart}", "--node", "{ck:node_id}", "--out", "{ck:run_dir}/x",
               "--lit", "$SLURM_JOB_ID $(touch /tmp/ck-ph-pwned) {lr} {ck:job_id", "--empty", ""]
    result = ck("render", "--site", "testbed", "--nodes", "2", "--launcher", "torchrun", "--set", "container=false",
                "--out", str(out), "--", *command)
    assert result.code == 0, result.err
    text = (out / "job.sbatch").read_text()
    assert "--save 'ckpt/{ck:job_id}'" in text   # the command stays as written in job.sbatch's ck_cmd
    got = _replace(_body(text), command[2:], CK_JOB_ID="4242", SLURM_NODEID="1", SLURMD_NODENAME="node2",
                   SLURM_RESTART_COUNT="3", CK_RUN_DIR=HOSTILE_DIR)
    assert got == ["--save", "ckpt/4242", "--tb", "tb/node2-1", "--restart=3", "--node", "1",
                   "--out", f"{HOSTILE_DIR}/x", "--lit", "$SLURM_JOB_ID $(touch /tmp/ck-ph-pwned) {lr} {ck:job_id",
                   "--empty", ""]
    assert not Path("/tmp/ck-ph-pwned").exists()
    # a local run: node 0, this host, no restart
    local = _replace(_body(text), ["{ck:node_id}", "{ck:node_name}", "{ck:restart}"], CK_JOB_ID="1")
    assert local[0] == "0" and local[1] and local[2] == "0"


def test_a_command_without_placeholders_gets_no_replacement_lines(ck, tmp_path: Path) -> None:
    result = ck("render", "--site", "testbed", "--nodes", "2", "--out", str(tmp_path / "run"),
                "--", "python", "train.py", "--save", "$SLURM_JOB_ID")
    assert result.code == 0, result.err
    assert "ck_args" not in (tmp_path / "run" / "job.sbatch").read_text()


def test_launcher_arg_placeholders_are_the_nodes_expansions(ck, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = ck("render", "--site", "testbed", "--nodes", "2", "--launcher", "torchrun", "--set", "container=false",
                "--launcher-arg=--log-dir=logs/{ck:job_id}/{ck:node_id}", "--out", str(out), "--", "python", "t.py")
    assert result.code == 0, result.err
    body = _body((out / "job.sbatch").read_text())
    assert ' --log-dir=logs/"$CK_JOB_ID"/"${SLURM_NODEID:-0}" "$@"' in body
    word = body[body.index("--log-dir="):body.index(' "$@"')]
    echo = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, text=True, check=True,
                          env={"CK_JOB_ID": "9", "SLURM_NODEID": "1"})
    assert echo.stdout == "--log-dir=logs/9/1"


@pytest.mark.parametrize("args,needle", [
    (("--", "python", "t.py", "--save", "c/{ck:jobid}"), "{ck:jobid}: unknown run-time value; use one of {ck:job_id}"),
    (("--", "python", "t.py", "--i", "{ck:array_index}"), "{ck:array_index} is a job array's task index"),
    (("--launcher-arg=--log-dir={ck:nodeid}", "--", "python", "t.py"), "{ck:nodeid}: unknown run-time value"),
])
def test_unknown_or_meaningless_placeholders_are_refused(ck, tmp_path: Path, args: tuple[str, ...],
                                                        needle: str) -> None:
    result = ck("render", "--site", "testbed", "--nodes", "2", "--out", str(tmp_path / "run"), *args)
    assert_one_line_error(result, 2, "clusterkit: error: ", needle)
    assert not (tmp_path / "run").exists()


def test_a_nodes_own_value_is_refused_where_one_launcher_starts_every_node(ck, tmp_path: Path) -> None:
    site = shared_site(tmp_path / "s", "testbed", tmp_path)
    base = ("render", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--launcher", "horovod",
            "--set", "max_restarts=0")
    result = ck(*base, "--out", str(tmp_path / "run"), "--", "python", "t.py", "--tag", "{ck:node_name}")
    assert_one_line_error(result, 2, "{ck:node_name}: horovod starts every node's workers from the batch host")
    ok = ck(*base, "--out", str(tmp_path / "ok"), "--", "python", "t.py", "--save", "c/{ck:job_id}")
    assert ok.code == 0, ok.err


def test_array_index_in_a_job_array(ck, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = ck("render", "--site", "testbed", "--nodes", "2", "--array", "0-3", "--set", "container=false",
                "--out", str(out), "--", "python", "t.py", "--seed", "{ck:array_index}")
    assert result.code == 0, result.err
    assert _replace(_body((out / "job.sbatch").read_text()), ["{ck:array_index}"], CK_ARRAY_INDEX="2") == ["2"]
