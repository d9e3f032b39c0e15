"""Real ``scontrol`` captures (tests/data/captures/scontrol) through the admin commands' parsers,
and the node records end to end: ``sites init``, ``validate`` (loading the draft) and ``sites
drift`` with the real Slurm client seam (:func:`clusterkit.slurmclient.require`) running a
stand-in ``scontrol`` on PATH that prints the capture (the cluster config: the testbed's 22.05
capture; no partition listing, so the draft covers the capture's nodes)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from clusterkit.config.load import load_file
from clusterkit.sites import admin
from clusterkit.sites import slurm_text as T
from tests.captures.capture import Capture, captures, stand_in
from tests.conftest import REPO

ALL = captures("scontrol")
NODES = [c for c in ALL if c.path.stem.startswith("node-")]
PARTITIONS = [c for c in ALL if c.path.stem.startswith("partition-")]
CONFIGS = [c for c in ALL if c.path.stem.startswith("config-")]
INIT = [c for c in NODES if c.expected["init"] is not None]
TESTBED_CONFIG = (REPO / "tests" / "data" / "sites" / "slurm-22.05" / "show-config.txt").read_text()


@pytest.mark.parametrize("cap", NODES, ids=[c.name for c in NODES])
def test_node_records_read_off_by_hand(cap: Capture) -> None:
    parsed = T.parse_nodes(cap.body)
    assert parsed.unparsed == ()
    got: dict[str, dict[str, Any]] = {}
    for n in parsed.nodes:
        want = cap.expected["nodes"].get(n.name, {})
        got[n.name] = {"cpus": n.cpus, "cpus_total": n.cpus_total, "gpus": n.gpus, "gpu_types": list(n.gpu_types),
                       "real_memory_mb": n.real_memory_mb, "state": n.state,
                       "usable": n.usable if want.get("usable") is not None else None,
                       "reason": n.reason, "partitions": list(n.partitions)}
        if "job_memory_mb" in want:  # RealMemory less MemSpecLimit, read off by hand
            got[n.name]["job_memory_mb"] = n.job_memory_mb
    assert got == cap.expected["nodes"]


@pytest.mark.parametrize("cap", PARTITIONS, ids=[c.name for c in PARTITIONS])
def test_partition_records_read_off_by_hand(cap: Capture) -> None:
    parsed = T.parse_partitions(cap.body)
    assert parsed.unparsed == ()
    got = {p.name: {"default": p.default, "max_time": p.max_time, "default_time": p.default_time, "state": p.state,
                    "nodes": p.nodes} for p in parsed.partitions}
    assert got == cap.expected["partitions"]


@pytest.mark.parametrize("cap", CONFIGS, ids=[c.name for c in CONFIGS])
def test_config_read_off_by_hand(cap: Capture) -> None:
    config = T.parse_config(cap.body)
    assert (config.cluster_name, config.version) == (cap.expected["cluster"], cap.expected["version"])


def _value(text: str, key: str) -> tuple[str | None, str]:
    """A ``nodes:`` key's value as the draft wrote it (None when commented out) and its comment."""
    m = re.search(rf"^  (# )?{key}: (\S+(?: \S+)*?)\s*(?:# (.*))?$", text, re.MULTILINE)
    assert m, (key, text)
    return (None if m.group(1) else m.group(2)), m.group(3) or ""


@pytest.mark.parametrize("cap", INIT, ids=[c.name for c in INIT])
def test_init_validate_drift_through_a_stand_in_scontrol(cap: Capture, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(tmp_path / "bin", "scontrol", cap.body,
             by_args={"show config": TESTBED_CONFIG, "show partition -o": ""})
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{__import__('os').environ['PATH']}")
    want = cap.expected["init"]
    # nodes: the capture's nodes that make one kind (init drafts a site for one kind of node)
    draft = admin.init_site("cap", partition=None, nodes=want.get("nodes"), probe_with=None)   # slurmclient.require
    text = draft.text
    assert _value(text, "nodelist")[0] == f'"{want["nodelist"]}"'
    gpus = _value(text, "gpus_per_node")
    assert gpus[0] == (str(want["gpus_per_node"]) if want["gpus_per_node"] else "1")
    assert ("unverified" in gpus[1]) == (want["gpus_per_node"] is None)
    assert _value(text, "cpus_per_node")[0] == str(want["cpus_per_node"])
    model, why = _value(text, "gpu_model")
    assert model == (f'"{want["gpu_model"]}"' if want["gpu_model"] else None)
    assert ("unverified" in why) == want["gpu_model_unverified"]
    mem = _value(text, "mem_gb")[0]
    assert mem == (f'{want["mem_gb"]:g}' if want["mem_gb"] is not None else None)

    site_path = tmp_path / "cap.yaml"
    site_path.write_text(text)
    site = load_file(str(site_path))                                  # validate
    assert site.nodes.cpus_per_node == want["cpus_per_node"]
    (report,) = admin.drift_sites([str(site_path)]).reports           # drift against the same capture
    drift = [d for d in report.drift if d.key.startswith("nodes.")]
    if "nodes" in want:  # a site for some of the capture's nodes: the others are the cluster's, not the config's
        others = sorted(set(cap.expected["nodes"]) - {want["nodes"]})
        assert [(d.key, sorted(d.nodes.split(","))) for d in drift] == [("nodes.nodelist", others)], drift
    else:
        assert not drift, report.drift
    held_out = {(s.nodes, s.state, s.reason) for s in report.node_state}
    expected_out = {(name, n["state"], n["reason"]) for name, n in cap.expected["nodes"].items()
                    if not n["usable"] and name in want.get("nodes", name)}
    assert held_out == expected_out
