"""``clusterkit preflight`` end to end: real sshd nodes with fake tools, a dead address, a tarpit."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import groups_by_node, write_site

pytestmark = pytest.mark.sshlab


@pytest.fixture(scope="module")
def mixed_json(lab_ck, lab_site) -> tuple[int, dict[str, Any]]:  # type: ignore[no-untyped-def]
    proc = lab_ck("preflight", "--site", str(lab_site), "--stage", "multi-node", "--json")
    assert proc.err == ""
    return proc.code, json.loads(proc.out)


def check_messages(node: dict[str, Any]) -> dict[str, str]:
    return {c["check"] + (":" + c["target"] if c.get("target") else ""): c["message"]
            for c in node["checks"] if c["status"] == "fail"}


def test_mixed_nodes_exit_3_and_name_every_bad_node(mixed_json) -> None:  # type: ignore[no-untyped-def]
    rc, report = mixed_json
    assert rc == 3 and report["exit_code"] == 3
    nodes = groups_by_node(report)
    assert report["counts"] == {"ok": 4, "warn": 0, "failed": 8, "unreachable": 2, "unchecked": 0}
    assert report["failed"] == "node[03-10]" and report["unreachable"] == "dead01,tarpit01"
    assert {h for h, n in nodes.items() if n["status"] == "ok"} == {"node01", "node02", "node11", "node12"}
    assert check_messages(nodes["node03"]) == {"gpu.count": "7 GPUs, expected 8"}
    assert check_messages(nodes["node04"]) == {"ib.ports": "mlx5_3 port 1 DOWN (Disabled)",
                                               "ib.rate": "mlx5_3 port 1 10 Gb/s < 400 Gb/s"}
    assert check_messages(nodes["node05"]) == {"gpu.driver": "driver 470.239.06 < 535.104 required",
                                               "gpu.cuda": "CUDA 11.4 < 12.4 required"}
    assert check_messages(nodes["node06"]) == {
        "storage.mounted:/lustre/scratch": "/lustre/scratch not mounted as lustre (only / (ext4) serves it)"}
    assert check_messages(nodes["node07"]) == {"gpu.ecc": "uncorrected ECC errors (GPU 5: 3)"}


def test_garbage_nvidia_smi_is_a_parse_failure_on_that_node(mixed_json) -> None:  # type: ignore[no-untyped-def]
    _, report = mixed_json
    node = groups_by_node(report)["node08"]
    present = next(c for c in node["checks"] if c["check"] == "gpu.present")
    assert present["status"] == "fail"
    assert present["message"].startswith("could not parse nvidia-smi --query-gpu: line 1 has")
    assert "segfault at 0000" in present["raw"]
    # its network and storage were still checked
    assert {c["check"]: c["status"] for c in node["checks"]}["ib.ports"] == "ok"


def test_hung_mount_and_hung_command_are_bounded_failures(mixed_json) -> None:  # type: ignore[no-untyped-def]
    _, report = mixed_json
    nodes = groups_by_node(report)
    assert check_messages(nodes["node09"]) == {"storage.free:/lustre/scratch": "/lustre/scratch: no answer within 2 s"}
    hung = nodes["node10"]
    assert hung["status"] == "failed" and hung["reachable"] is True
    assert hung["error_kind"] == "command-timeout" and hung["error"].startswith("remote command timed out")
    hung_group = next(g for g in report["groups"] if g["nodes"] == "node10")
    assert hung_group["lines"] == ["remote command timed out: command still running after 6 s; abandoned"]
    assert all(c.get("cut") for c in hung["checks"] if c["status"] == "fail")
    # cut at the site's 6 s command timeout: had we waited for the fake's 60 s sleep to end,
    # the node would show finished-but-empty sections instead of a command-timeout


def test_unreachable_nodes_say_why(mixed_json) -> None:  # type: ignore[no-untyped-def]
    _, report = mixed_json
    nodes = groups_by_node(report)
    assert nodes["dead01"]["error_kind"] == "refused" and "connection refused" in nodes["dead01"]["error"]
    assert nodes["tarpit01"]["error_kind"] == "timeout" and "SSH banner" in nodes["tarpit01"]["error"]


def test_json_shape(mixed_json) -> None:  # type: ignore[no-untyped-def]
    _, report = mixed_json
    assert set(report) == {"schema_version", "version", "site", "stage", "transport", "exit_code", "interrupted",
                           "elapsed_s", "counts", "failed", "unreachable", "unchecked", "common_fault", "notes",
                           "groups", "checks", "nodes"}
    assert (report["version"], report["site"], report["stage"], report["transport"]) == (1, "lab", "multi-node", "ssh")
    # in hostlist order (ClusterShell's NodeSet sorts names)
    assert [n["host"] for n in report["nodes"]] == ["dead01"] + [f"node{i:02d}" for i in range(1, 13)] + ["tarpit01"]
    ok_group = report["groups"][-1]
    assert ok_group == {"status": "ok", "count": 4, "nodes": "node[01-02,11-12]", "lines": []}
    assert report["groups"][0]["status"] == "unreachable"
    assert {c["check"] for c in report["checks"]} >= {"gpu.count", "ib.ports", "ib.peermem", "storage.writable"}


def test_plain_output_groups_identical_results(lab_ck, lab_site) -> None:  # type: ignore[no-untyped-def]
    proc = lab_ck("preflight", "--site", str(lab_site), "--nodelist", "node[01-04,11-12]")
    assert proc.code == 1, proc.out + proc.err
    lines = proc.out.splitlines()
    assert "FAILED      node03: gpu.count: 7 GPUs, expected 8" in lines
    assert ("FAILED      node04: ib.ports: mlx5_3 port 1 DOWN (Disabled); "
            "ib.rate: mlx5_3 port 1 10 Gb/s < 400 Gb/s") in lines
    assert "OK          4 nodes: ok" in lines
    assert lines[-1].startswith("preflight lab (multi-node, ssh): 6 of 6 nodes checked in ")
    assert lines[-1].endswith("4 ok, 2 failed")
    assert "\x1b[" not in proc.out  # no colour codes in a pipe


def test_all_healthy_exit_0(lab_ck, lab_site) -> None:  # type: ignore[no-untyped-def]
    proc = lab_ck("preflight", "--site", str(lab_site), "--nodelist", "node[01-02]", "--json")
    report = json.loads(proc.out)
    assert proc.code == 0 and report["counts"]["ok"] == 2


def test_single_node_stage_skips_ib_and_shared_storage(lab_ck, lab_site) -> None:  # type: ignore[no-untyped-def]
    # node04's IB port is down and node06 has no Lustre: neither matters on one node
    for node in ("node04", "node06"):
        proc = lab_ck("preflight", "--site", str(lab_site), "--nodelist", node, "--stage", "single-node")
        assert proc.code == 0, proc.out
        assert "note: single-node stage: InfiniBand and shared-storage checks skipped" in proc.out


def test_large_cluster_warns_on_nfs_without_failing(lab_ck, lab_site) -> None:  # type: ignore[no-untyped-def]
    proc = lab_ck("preflight", "--site", str(lab_site), "--nodelist", "node[01-02]", "--stage", "large-cluster")
    assert proc.code == 0, proc.out
    assert ("WARN        2 nodes (node[01-02]): storage.nfs_at_scale: /home is NFS: at large-cluster scale prefer "
            "Lustre/GPFS") in proc.out.splitlines()


def test_unknown_host_keys_refused_then_accepted(lab, lab_ck, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    known = tmp_path / "known_hosts"
    site = write_site(tmp_path / "site.yaml", lab, nodelist="node[01-02]", known_hosts=str(known))
    proc = lab_ck("preflight", "--site", str(site), "--json")
    report = json.loads(proc.out)
    assert proc.code == 3
    assert {n["error_kind"] for n in report["nodes"]} == {"hostkey-unknown"}
    proc = lab_ck("preflight", "--site", str(site), "--accept-new-host-keys")
    assert proc.code == 0, proc.out
    assert len(known.read_text().splitlines()) == 2
    assert lab_ck("preflight", "--site", str(site)).code == 0  # now known


def test_ctrl_c_prints_what_was_checked(lab, lab_ck, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = write_site(tmp_path / "slow.yaml", lab, nodelist="node[01-02,10]", command_timeout_s=40)
    proc = lab_ck.popen("preflight", "--site", str(site))
    time.sleep(8)  # the healthy nodes answer within a second or two; node10 hangs for 40 s
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, out + err
    assert "OK          2 nodes: ok" in out.splitlines()
    assert "UNCHECKED   node10: interrupted before these answered" in out.splitlines()
    assert "Traceback" not in err


def test_ctrl_c_with_worker_processes_prints_what_was_checked(sshlab_factory: Any, tmp_path: Path) -> None:
    """68 nodes: the run is split over worker processes; Ctrl-C to the CLI alone (as `kill
    -INT` sends it) still reports the nodes that answered and lists the others unchecked."""
    from tests.conftest import CLI

    mapping = {**{f"a{i:02d}": "healthy" for i in range(1, 5)},  # (host lists sort: these come first)
               **{f"h{i:02d}": "hung_command" for i in range(1, 65)}}
    big = sshlab_factory(mapping)  # sshd logs each session's close (VERBOSE)
    site = write_site(tmp_path / "big.yaml", big, nodelist="a[01-04],h[01-64]", command_timeout_s=90)
    ck = CLI().bind(process=True, wrap=big.wrap, env={**big.env(), "SSH_AUTH_SOCK": None})
    proc = ck.popen("preflight", "--site", str(site), "--stage", "multi-node")
    deadline = time.monotonic() + 60  # the healthy nodes answer within seconds on an idle machine
    while time.monotonic() < deadline and sum(
            p.read_text(errors="replace").count("Close session:") for p in big.sshd_logs()) < 4:
        time.sleep(0.5)  # (the hung nodes' sessions stay open for 90 s)
    time.sleep(2)  # their results reach the calling process
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, out + err
    assert "OK          4 nodes: ok" in out.splitlines(), out
    assert "UNCHECKED   h[01-64]: interrupted before these answered" in out.splitlines(), out
    assert "Traceback" not in err
