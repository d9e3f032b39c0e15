"""``doctor --logs <run>/logs`` reads each line once: torchrun's ``--tee`` writes every rank's line to
the node's log (srun's output) and to the rank's own file under ``torchrun-<job>.r<restart>/<node>``;
the node log is read and the per-rank copies only where no node log of their job, restart and node
was given.  The layout is made by a real torchrun run, as clusterkit's torchrun launcher starts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clusterkit.diagnose.names import name_facts, without_copies

TRAIN = """import torch.distributed as dist
dist.init_process_group("gloo")
print(f"step 1 of rank {dist.get_rank()}", flush=True)
dist.barrier()
x = {}
x["missing_key"]
"""


@pytest.fixture(scope="module")
def run_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<run>/logs`` of job 900 on node ``nodeA``: the node log as srun writes it and torchrun's per-rank files."""
    pytest.importorskip("torch")
    run = tmp_path_factory.mktemp("run")
    logs = run / "logs"
    logs.mkdir()
    (run / "train.py").write_text(TRAIN)
    env = {**os.environ, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]: ", "OMP_NUM_THREADS": "1"}
    with open(logs / "900.r0.nodeA.out", "wb") as out:   # srun --output: the node's stdout and stderr
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                               "--nproc-per-node", "2", "--tee", "3",
                               "--log-dir", str(logs / "torchrun-900.r0" / "nodeA"), "train.py"],
                              cwd=run, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300)
    assert proc.returncode != 0
    return logs


def _doctor(ck: Any, path: Path) -> dict[str, Any]:
    result = ck("doctor", "--logs", str(path), "--json")
    assert result.code == 1, result.err
    report: dict[str, Any] = json.loads(result.out)
    return report


@pytest.mark.torch
def test_the_folder_reads_each_line_once(ck: Any, run_logs: Path) -> None:
    copies = sorted(run_logs.glob("torchrun-900.r0/nodeA/*/attempt_0/*/std*.log"))
    assert len(copies) == 4, copies     # stdout and stderr of local ranks 0 and 1
    folder = _doctor(ck, run_logs)
    alone = _doctor(ck, run_logs / "900.r0.nodeA.out")
    assert folder["files"]["read"] == 1 and folder["files"]["copies_left_out"] == 4, folder["files"]
    assert folder["restarts"] == alone["restarts"] and folder["cascade"] == alone["cascade"]
    assert all("/torchrun-900.r0/" not in e for e in folder["verdict"]["evidence"]), folder["verdict"]
    text = ck("doctor", "--logs", str(run_logs)).out.splitlines()
    assert text[:-1] == ck("doctor", "--logs", str(run_logs / "900.r0.nodeA.out")).out.splitlines()[:-1], text
    assert text[-1].endswith("; 4 torchrun per-rank copies left out (their node's log holds the same lines)"), text


@pytest.mark.torch
def test_the_copies_are_read_where_no_node_log_covers_them(ck: Any, run_logs: Path) -> None:
    folder = _doctor(ck, run_logs / "torchrun-900.r0")
    assert folder["files"]["read"] == 4 and folder["files"]["copies_left_out"] == 0, folder["files"]
    v = folder["verdict"]
    assert v["category"] == "user-code" and v["node"] == "nodeA", v   # the node from the folder's name
    # a rank stopped by torchrun before it raised has no KeyError: each one there is from a rank's own file
    raised = [e for e in v["evidence"] if "KeyError: 'missing_key'" in e]
    assert raised and all("/torchrun-900.r0/nodeA/" in e for e in raised), v


def test_a_node_log_covers_only_its_own_job_restart_and_node() -> None:
    copy = Path("logs/torchrun-900.r1/nodeA/x_1/attempt_0/3/stderr.log")
    assert name_facts(copy) == (1, "nodeA", None)
    others = [Path("logs/900.r0.nodeA.out"), Path("logs/900.r1.nodeB.out"), Path("logs/901.r1.nodeA.out")]
    assert without_copies([*others, copy]) == ([*others, copy], 0)
    assert without_copies([Path("logs/900.r1.a2.nodeA.out"), copy]) == ([Path("logs/900.r1.a2.nodeA.out")], 1)
    # a local job's one log holds its only node's lines, whatever the host is called
    assert without_copies([Path("900_0_log.out"), copy]) == ([Path("900_0_log.out")], 1)
    assert without_copies([Path("901_0_log.out"), copy]) == ([Path("901_0_log.out"), copy], 0)
