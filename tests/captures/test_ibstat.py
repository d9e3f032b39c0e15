"""Real ``ibstat`` captures (tests/data/captures/ibstat) through the parser, ``sites init --probe``
and preflight: the probe and the checks run the real node script through the real local
transport, with a stand-in ``ibstat`` that prints the capture (and the SSH lab's 'healthy'
nvidia-smi stand-in for the GPU sections).  Slurm's side of ``sites init`` is the testbed's
22.05 capture (tests/data/sites/slurm-22.05) through the ``run`` seam."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from clusterkit.config.load import load_file
from clusterkit.job import nccl
from clusterkit.nodes import device_parsers as D
from clusterkit.nodes.facts import probe
from clusterkit.nodes.transport import LocalRunner
from clusterkit.preflight.engine import Status
from clusterkit.preflight.run import run_preflight
from clusterkit.sites import admin
from tests.captures.capture import Capture, captures, env_with, stand_in
from tests.conftest import REPO

SLURM = REPO / "tests" / "data" / "sites" / "slurm-22.05"
HEALTHY_SMI = REPO / "tests" / "sshlab" / "profiles" / "healthy" / "bin" / "nvidia-smi"
CAPTURES = captures("ibstat")
IB_CHECKS = ("ib.hcas", "ib.ports", "ib.rate", "ib.link_layer")


def _slurm(argv: Any) -> str:
    names = {("scontrol", "show", "config"): "show-config.txt",
             ("scontrol", "show", "partition", "-o"): "show-partition-o.txt",
             ("scontrol", "show", "node", "-o"): "show-node-o.txt"}
    return (SLURM / names[tuple(argv)]).read_text()


def _node_bin(tmp_path: Path, ibstat_text: str) -> dict[str, str]:
    """PATH with a stand-in ibstat printing ``ibstat_text`` and the healthy nvidia-smi stand-in."""
    bin_dir = tmp_path / "bin"
    stand_in(bin_dir, "ibstat", ibstat_text)
    (bin_dir / "nvidia-smi").symlink_to(HEALTHY_SMI)
    return env_with(bin_dir)


def _init(tmp_path: Path, env: dict[str, str]) -> tuple[str, Path]:
    draft = admin.init_site("cap", partition="debug", nodes="node1", probe_with="srun", run=_slurm,
                            runner_for=lambda site, transport: LocalRunner(command_timeout_s=30, env=env))
    path = tmp_path / "cap.yaml"
    path.write_text(draft.text)
    return draft.text, path


def _verdicts(site_path: Path, env: dict[str, str]) -> dict[str, tuple[Status, str]]:
    site = load_file(str(site_path))
    report = run_preflight(site, stage="multi-node", transport="local",
                           runner=LocalRunner(command_timeout_s=30, env=env))
    (node,) = report.nodes
    return {c.check: (c.status, c.message) for c in node.checks}


def _network(text: str) -> dict[str, Any]:
    """The network values a draft wrote (read from its text, as an admin would)."""
    out: dict[str, Any] = {}
    for key in ("fabric", "port_rate_gbps"):
        m = re.search(rf"^  {key}: (\S+)", text, re.MULTILINE)
        out[key] = (int(m.group(1)) if key == "port_rate_gbps" else m.group(1)) if m else None
    m = re.search(r"^  hcas: \[([^\]]*)\]", text, re.MULTILINE)
    out["hcas"] = m.group(1).split(", ") if m else None
    m = re.search(r"^  # not the fabric's: (.*?)\s+#", text, re.MULTILINE)
    out["others"] = re.findall(r"(\S+) \(", m.group(1)) if m else []
    m = re.search(r"^  # lower rate tier: (.*?)\s+# unverified", text, re.MULTILINE)
    out["lower_tier"] = re.findall(r"(\S+) \(", m.group(1)) if m else []
    return out


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_parser_reads_what_was_read_off_by_hand(cap: Capture) -> None:
    inv = D.parse_ib(cap.body)
    assert isinstance(inv, D.IbInventory), inv
    got = {f"{p.hca}:{p.port}": [p.state, p.phys_state, p.rate_gbps, p.link_layer] for p in inv.ports}
    assert got == cap.expected["ports"]
    assert list(inv.missing) == cap.expected["missing"]


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_init_probe_and_preflight_end_to_end(cap: Capture, tmp_path: Path) -> None:
    env = _node_bin(tmp_path, cap.body)
    text, path = _init(tmp_path, env)
    assert _network(text) == cap.expected["init"], text
    verdicts = _verdicts(path, env)
    got = {k: v[0].value if v[0] is Status.OK else f"{v[0].value}: {v[1]}" for k, v in verdicts.items()
           if k in IB_CHECKS}
    assert got == cap.expected["preflight"]


BOND = next(c for c in CAPTURES if c.path.stem == "gpud-h100-8rails-bond")


def test_ib_rails_beside_a_roce_bond_nccl_takes_exactly_the_rails(tmp_path: Path) -> None:
    """The DGX/HGX layout: 8 InfiniBand rails at 400 and an Ethernet bond on the same driver."""
    text, path = _init(tmp_path, _node_bin(tmp_path, BOND.body))
    assert re.search(r"# not the fabric's: mlx5_bond_0 \(Ethernet\) +# left out of hcas and NCCL_IB_HCA", text), text
    site = load_file(str(path))
    env = {v.name: v.value for v in nccl.policy(site, "multi-node")}
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1,mlx5_4,mlx5_5,mlx5_6,mlx5_7,mlx5_8,mlx5_9"


def test_a_rail_trained_down_fails_preflight_beside_the_bond(tmp_path: Path) -> None:
    """The site written from the healthy node; then one rail at 200 (the capture with mlx5_4's
    rate edited: a derived text, not a capture) fails ib.rate, and the bond still is not judged."""
    _, path = _init(tmp_path / "init", _node_bin(tmp_path / "init", BOND.body))
    block = re.search(r"CA 'mlx5_4'\n(?:[ \t].*\n)+", BOND.body)
    assert block and "Rate: 400" in block.group(0)
    slow = BOND.body.replace(block.group(0), block.group(0).replace("Rate: 400", "Rate: 200"))
    verdicts = _verdicts(path, _node_bin(tmp_path / "slow", slow))
    assert verdicts["ib.rate"] == (Status.FAIL, "mlx5_4 port 1 200 Gb/s < 400 Gb/s")
    assert {k: verdicts[k][0] for k in ("ib.hcas", "ib.ports", "ib.link_layer")} == \
        dict.fromkeys(("ib.hcas", "ib.ports", "ib.link_layer"), Status.OK)


def test_drift_proposes_no_bond_among_the_hcas(tmp_path: Path) -> None:
    env = _node_bin(tmp_path, BOND.body)
    _, path = _init(tmp_path, env)
    result = admin.drift_sites([str(path)], probe_with="srun", run=_slurm,
                               runner_for=lambda site, transport: LocalRunner(command_timeout_s=30, env=env))
    (report,) = result.reports
    assert "hcas" not in report.live and "network.hcas" not in {d.key for d in report.drift}, report


SYSFS = captures("sysfs")


@pytest.mark.parametrize("cap", SYSFS, ids=[c.name for c in SYSFS])
def test_sysfs_tree_through_the_probe_init_and_preflight(cap: Capture, tmp_path: Path) -> None:
    """A captured /sys/class/infiniband tree as the node's sysroot: the real ib section greps it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(HEALTHY_SMI)
    env = {**env_with(bin_dir), "CLUSTERKIT_SYSROOT": str(cap.path.with_suffix(""))}
    facts = probe(["node1"], LocalRunner(command_timeout_s=30, env=env))["node1"]
    assert facts.ib is not None and facts.ib.source == "sysfs", facts
    assert {f"{p.hca}:{p.port}": [p.state, p.phys_state, p.rate_gbps, p.link_layer] for p in facts.ib.ports} == \
        cap.expected["ports"]
    text, path = _init(tmp_path, env)
    assert _network(text) == cap.expected["init"], text
    got = {k: v[0].value if v[0] is Status.OK else f"{v[0].value}: {v[1]}" for k, v in _verdicts(path, env).items()
           if k in IB_CHECKS}
    assert got == cap.expected["preflight"]


ROCE = next(c for c in CAPTURES if c.path.stem == "gpud-h100-roce-12")
ROCE_RAILS = ["mlx5_0", "mlx5_10", "mlx5_11", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9"]


def test_roce_front_end_nics_are_a_lower_tier_left_out_of_nccl(tmp_path: Path) -> None:
    """8 ConnectX-7 (MT4129) at 400 and 4 ConnectX-6 Dx (MT4125) at 100, all Ethernet: NCCL gets
    the ConnectX-7s; the others are named in the draft and listed as unverified."""
    env = _node_bin(tmp_path, ROCE.body)
    draft = admin.init_site("cap", partition="debug", nodes="node1", probe_with="srun", run=_slurm,
                            runner_for=lambda site, transport: LocalRunner(command_timeout_s=30, env=env))
    assert re.search(r"# lower rate tier: mlx5_1 \(MT4125, 100 Gb/s\), mlx5_2 \(MT4125, 100 Gb/s\), "
                     r"mlx5_7 \(MT4125, 100 Gb/s\), mlx5_8 \(MT4125, 100 Gb/s\) +# unverified", draft.text), draft.text
    assert any(u.startswith("network.hcas: mlx5_1, mlx5_2, mlx5_7, mlx5_8 left out") for u in draft.unverified)
    path = tmp_path / "cap.yaml"
    path.write_text(draft.text)
    site = load_file(str(path))
    env_nccl = {v.name: v.value for v in nccl.policy(site, "multi-node")}
    assert env_nccl["NCCL_IB_HCA"] == "=" + ",".join(ROCE_RAILS)


def test_a_roce_rail_trained_down_stays_a_rail_by_its_model(tmp_path: Path) -> None:
    """mlx5_3 (a ConnectX-7 like the rails) at 100 on the probed node (the capture with its rate
    edited: a derived text): the same model as the 400 tier, so still a rail; the site says 400 and
    preflight fails the slow rail.  Without the models (the CA type lines cut) rate alone decides:
    it is taken for a front-end NIC, as the draft's unverified comment says."""
    block = re.search(r"CA 'mlx5_3'\n(?:[ \t].*\n)+", ROCE.body)
    assert block and "Rate: 400" in block.group(0) and "CA type: MT4129" in block.group(0)
    slow = ROCE.body.replace(block.group(0), block.group(0).replace("Rate: 400", "Rate: 100"))
    env = _node_bin(tmp_path / "slow", slow)
    text, path = _init(tmp_path / "slow", env)
    assert _network(text)["hcas"] == ROCE_RAILS and _network(text)["port_rate_gbps"] == 400, text
    assert "below it on a probed node: mlx5_3 100" in text, text
    assert _verdicts(path, env)["ib.rate"] == (Status.FAIL, "mlx5_3 port 1 100 Gb/s < 400 Gb/s")
    no_models = re.sub(r"\tCA type: .*\n", "", slow)
    text, _ = _init(tmp_path / "nomodel", _node_bin(tmp_path / "nomodel", no_models))
    assert "mlx5_3" not in _network(text)["hcas"] and "mlx5_3" in _network(text)["lower_tier"], text
    assert "mlx5_3 (model unknown, 100 Gb/s)" in text, text


def test_sysfs_hca_type_names_the_model() -> None:
    """The probe's sysfs section also greps each device's hca_type (what ibstat prints as CA type)."""
    inv = D.parse_ib_sysfs("/sys/class/infiniband/mlx5_0/hca_type:MT4129\n"
                           "/sys/class/infiniband/mlx5_0/ports/1/rate:400 Gb/sec (4X NDR)\n"
                           "/sys/class/infiniband/mlx5_9/hca_type:MT4125\n")
    assert isinstance(inv, D.IbInventory)
    assert inv.model_of("mlx5_0") == "MT4129" and inv.model_of("mlx5_9") is None and inv.hcas == ["mlx5_0"]
