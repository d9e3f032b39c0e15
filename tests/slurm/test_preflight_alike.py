"""A job whose in-job perf check fails on every node alike launches on them, without a requeue.

The testbed has no GPUs, so ``perf.backend: nccl`` fails in every task alike (no CUDA, no driver):
the check's environment, not the nodes.  The job holds one of each node's eight GPUs, so the
check's step is sized to the job (one task a node), not to the site (eight), which Slurm would
refuse inside the allocation.  Before: every node marked bad and the job requeued without them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from .conftest import CK, REPO, Testbed
from .test_spares import _job_id, _logs, _selection

pytest.importorskip("torch", reason="the perf check needs torch")


@pytest.fixture
def cli(ck, testbed5: Testbed, tmp_path: Path) -> CK:  # type: ignore[no-untyped-def]
    tmp_path.chmod(0o755)
    return CK(bed=testbed5, state_dir=tmp_path / "state", runs=tmp_path / "runs", ck=ck)


def test_a_perf_check_failing_on_every_node_alike_drops_no_node(cli: CK, tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "site_configs" / "testbed.yaml").read_text())
    data["name"], data["nodes"]["nodelist"] = "testbed-alike", "node[1-5]"
    data["preflight"] = {"before_submit": False, "in_job": True}
    data["perf"] = {"backend": "nccl", "timeout_s": 240}
    site = tmp_path / "testbed-alike.yaml"
    site.write_text(yaml.safe_dump(data))
    run_dir = cli.runs / "alike"
    cli.bed.wait_idle()
    proc = cli("submit", "--site", str(site), "--stage", "multi-node", "--gpus-per-node", "1", "--launcher",
               "torchrun", "--nodes", "2", "--set", "preflight_in_job=perf", "--out", str(run_dir), "--wait",
               "--", "python", "examples/allreduce.py", timeout=400)
    logs = _logs(run_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr + logs
    job = _job_id(proc.stdout)
    report = json.loads((run_dir / "logs" / f"preflight-{job}.r0.json").read_text())
    assert {n["status"] for n in report["nodes"]} == {"unjudged"} and report["failed"] == "", report
    assert any(w in report["common_fault"] for w in ("CUDA", "NVIDIA driver")), report["common_fault"]
    sel = _selection(run_dir, job)
    assert sel["outcome"] == "launch" and sel["dropped"] == [] and len(sel["chosen"]) == 2, sel
    assert "preflight judged no node: it failed on every node alike" in logs, logs
    assert "requeued with" not in logs and not (run_dir / "logs" / f"preflight-{job}.r1.json").exists(), logs
    assert "allreduce OK: world_size=2" in logs, logs
