"""``python -m clusterkit.supervise.start``: the supervisor's start, called wrongly (its work on a
rendered job script is tests/jobscript/test_choose.py's, with the preflight stand-in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.supervise.start import parse, storage_warnings

ENV = {"CK_RUN_DIR": "/shared/runs/a", "CK_JOB_ID": "4321", "SLURM_JOB_ID": "4321",
       "SLURM_JOB_NODELIST": "node[1-3]", "SLURM_RESTART_COUNT": "0"}
CALL = ["--site", "/s.yaml", "--stage", "multi-node", "--nodes", "2"]


def test_the_job_scripts_call_is_read() -> None:
    a = parse([*CALL, "--spares", "1", "--perf", "--srun-arg=--mpi=none", "--max-restarts", "2",
               "--exclude", "node4", "--site-nodes", "5", "--resubmit", "clusterkit submit x"], ENV)
    assert (a.nodes, a.spares, a.perf, a.srun_arg, a.max_restarts, a.exclude, a.site_nodes) == \
        (2, 1, True, ["--mpi=none"], 2, "node4", 5)


@pytest.mark.parametrize("argv,env,words", [
    (["--stage", "s", "--nodes", "2"], ENV, "--site"),
    ([*CALL[:-1], "0"], ENV, "--nodes must be 1 or more"),
    ([*CALL, "--spares", "-1"], ENV, "--nodes must be 1 or more"),
    (CALL, {k: v for k, v in ENV.items() if k != "SLURM_JOB_NODELIST"}, "SLURM_JOB_NODELIST not set"),
    (CALL, {**ENV, "SLURM_RESTART_COUNT": "1;x"}, "SLURM_RESTART_COUNT='1;x'"),
])
def test_a_wrong_call_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                             env: dict[str, str], words: str) -> None:
    with pytest.raises(SystemExit) as stop:
        parse(argv, env)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and err.startswith("clusterkit supervise.start: ")


def test_as_a_process_a_wrong_call_has_no_traceback() -> None:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    p = subprocess.run([sys.executable, "-m", "clusterkit.supervise.start", *CALL], capture_output=True, text=True,
                       env={**keep, "CK_RUN_DIR": "/r"}, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_the_checkpoint_checks_warnings_are_said_once_with_their_nodes(tmp_path: Path) -> None:
    """The in-job preflight's checkpoint capacity warnings reach the job's log (the report is data)."""
    msg = "checkpoints: 2 x 14.00 TB = 28.00 TB does not fit in /ckpt: 60.9 GB free"
    warn = {"check": "checkpoint.capacity", "status": "warn", "message": msg + "\x1b[31m"}
    other = {"check": "gpu.count", "status": "warn", "message": "not this one"}
    nodes = [{"host": h, "checks": [warn, other]} for h in ("node1", "node2")] + [{"host": "node3", "checks": []}]
    report = tmp_path / "preflight.json"
    report.write_text(json.dumps({"nodes": nodes}))
    assert storage_warnings(report) == [f"{msg} (on node1, node2)"]
    report.write_text("{not json")
    assert storage_warnings(report) == []
    assert storage_warnings(tmp_path / "missing.json") == []
