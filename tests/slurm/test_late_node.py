"""A node that reaches torchrun late still joins the job: the rendezvous waits for it.

At scale nodes reach torchrun minutes apart (an image imported per node, a slow mount).  Here
node4's torchrun starts only once the other three are waiting in the rendezvous: the store on the
head accepts connections and nodes 1-3 have each started their torchrun.  A ``--node-setup`` delay
cannot show this: that step ends on every node before the launch step starts.

Stand-in, named as such: ``torchrun`` on the job's PATH is a wrapper around the real one that
marks its start on every node and, on node4 only, waits for the state above before it runs the
real torchrun.  Every wait is for a state, none for a guessed time.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from .conftest import CK
from .test_submit_e2e import _check_allreduce, _submitted_id

pytest.importorskip("torch", reason="the ranks need torch (pip install torch, CPU build)")

WRAPPER = """#!/bin/bash
# stand-in for a node that arrives late: the real torchrun, on node4 only after the others wait for it
date +%s.%N > "{marks}/$SLURMD_NODENAME.start"
if [ "$SLURMD_NODENAME" = node4 ]; then
  until [ -e {marks}/node1.start ] && [ -e {marks}/node2.start ] && [ -e {marks}/node3.start ] &&
        (exec 3<>"/dev/tcp/$CK_HEAD/$CK_PORT") 2>/dev/null; do sleep 0.2; done
  date +%s.%N > "{marks}/node4.late"
fi
exec {torchrun} "$@"
"""


def test_a_node_that_reaches_torchrun_last_still_joins_and_the_job_completes(cli: CK, tmp_path: Path) -> None:
    real = shutil.which("torchrun")
    assert real, "torchrun is not on PATH (pip install torch)"
    marks, wrap = tmp_path / "marks", tmp_path / "late-bin"
    marks.mkdir(mode=0o777)
    wrap.mkdir()
    (wrap / "torchrun").write_text(WRAPPER.format(marks=marks, torchrun=real))
    (wrap / "torchrun").chmod(0o755)
    env = cli.env()
    env["PATH"] = f"{wrap}:{env['PATH']}"
    run_dir = cli.runs / "late"
    cli.bed.wait_idle()
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "4", "--gpus-per-node", "1",
               "--launcher", "torchrun", "--out", str(run_dir), "--wait", "--", "python", "examples/allreduce.py",
               env=env, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _submitted_id(proc.stdout)
    assert f"Job {job} COMPLETED (exit code 0)" in proc.stdout
    # node4 started its torchrun after the store on the head was up and every other node's had started
    late = float((marks / "node4.late").read_text())
    assert all(float((marks / f"node{i}.start").read_text()) < late for i in (1, 2, 3))
    _check_allreduce(run_dir, 4, {"node1", "node2", "node3", "node4"})
    line = (run_dir / "job.sbatch").read_text()
    assert re.search(r"--rdzv-backend c10d --rdzv-endpoint \"\$CK_HEAD:\$CK_PORT\"", line)
