"""A site's own launcher declared as data (site key ``launchers:``) on the testbed: a centre's
wrapper of torchrun, written as the argv a site would give it, runs once per node through srun
with clusterkit's values (node count, processes per node, the rendezvous host and port, the job
id) and the user's script after it; the 4 ranks on 2 nodes meet in a real gloo all-reduce."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

from .conftest import CK

pytest.importorskip("torch", reason="examples/allreduce.py needs torch (pip install torch, CPU build)")

SITE = """\
extends: {base}
launchers:
  ctrun:
    argv: [torchrun, --nnodes, "{{ck:nnodes}}", --nproc-per-node, "{{ck:nproc_per_node}}",
           --rdzv-backend, c10d, "--rdzv-endpoint={{ck:rdzv_host}}:{{ck:rdzv_port}}", "--rdzv-id={{ck:job_id}}"]
    per: node
    command: script
"""


def test_a_sites_own_launcher_runs_on_two_nodes(cli: CK, tmp_path: Path) -> None:
    site = tmp_path / "centre.yaml"
    site.write_text(SITE.format(base=REPO / "site_configs" / "testbed.yaml"))
    run_dir = cli.runs / "declared"
    proc = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "2",
               "--launcher", "ctrun", "--no-snapshot", "--out", str(run_dir), "--wait", "--",
               "python", str(REPO / "examples" / "allreduce.py"), timeout=240)
    logs = "".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").glob("*")) if p.is_file())
    assert proc.returncode == 0, proc.stdout + proc.stderr + logs[-3000:]
    script = (run_dir / "job.sbatch").read_text()
    assert "torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d" in script, script
    assert "allreduce OK: world_size=4 sum=10" in logs, logs[-3000:]
    hosts = {m.group(1) for m in re.finditer(r"allreduce rank \d+/4 on (node\d+)", logs)}
    assert len(hosts) == 2, logs[-3000:]
