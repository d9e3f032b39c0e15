"""A check that fails on every node alike is the check's fault, not the nodes' (issue: a
site-wide problem had every node excluded and the job requeued).  Through the CLI, on the SSH
lab's healthy nodes (driver 535.183.01) against a site that asks for a driver no node has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import write_site

pytestmark = pytest.mark.sshlab

HEALTHY = "node[01-02,11-12]"


def _site(tmp_path: Path, lab, driver_min: str) -> Path:  # type: ignore[no-untyped-def]
    path = write_site(tmp_path / "lab.yaml", lab, nodelist=HEALTHY)
    path.write_text(path.read_text().replace('driver_min: "535.104"', f'driver_min: "{driver_min}"'))
    return path


def test_every_node_failing_alike_marks_no_node_bad(lab, lab_ck, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = _site(tmp_path, lab, "999.1")
    proc = lab_ck("preflight", "--site", str(site), "--stage", "multi-node", "--json")
    report = json.loads(proc.out)
    assert proc.code == 1 and report["exit_code"] == 1, proc.out
    assert report["failed"] == "" and report["unreachable"] == ""
    assert report["counts"]["unjudged"] == 4 and report["counts"]["failed"] == 0
    assert {n["status"] for n in report["nodes"]} == {"unjudged"}
    assert "gpu.driver" in report["common_fault"] and "999.1" in report["common_fault"], report["common_fault"]
    [group] = report["groups"]
    assert group["status"] == "unjudged" and group["count"] == 4

    text = lab_ck("preflight", "--site", str(site), "--stage", "multi-node")
    said = [ln for ln in text.out.splitlines() if ln.startswith("UNJUDGED")]
    assert len(said) == 1, text.out
    assert "the check failed on all 4 nodes alike: gpu.driver" in said[0]
    assert "a fault of the check or its environment, not of the nodes; no node is marked bad" in said[0]
    assert "FAILED" not in text.out


def test_one_node_failing_alone_is_still_that_nodes_fault(lab, lab_ck, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = write_site(tmp_path / "lab.yaml", lab, nodelist="node[01-03]")
    proc = lab_ck("preflight", "--site", str(site), "--stage", "multi-node", "--json")
    report = json.loads(proc.out)
    assert proc.code == 1 and report["failed"] == "node03" and report["common_fault"] is None, proc.out
    assert "unjudged" not in report["counts"]
