"""torchrun's rendezvous at scale: its timeout grows with the node count, and the plan notes
a torch below 2.4 at the large-cluster stage where the job's --venv shows it on the submit host.

The venvs here are folders laid out as pip lays one out (``lib/python3.X/site-packages/
torch-<version>.dist-info/METADATA``), holding only the metadata lines clusterkit reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterkit.job.launchers.torchrun import rendezvous_timeout
from clusterkit.job.torch_version import below, installed
from tests.render.test_golden import site_arg


def fake_venv(root: Path, *versions: str) -> Path:
    for i, version in enumerate(versions):
        info = root / "lib" / f"python3.{10 + i}" / "site-packages" / f"torch-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\nSummary: x\n")
    return root


def notes(ck, tmp_path: Path, stage: str, nodes: str, *extra: str, launcher: str = "torchrun") -> list[str]:
    run_dir = tmp_path / "run"
    result = ck("render", "--site", site_arg(tmp_path, "ib-h100", stage), "--stage", stage, "--nodes", nodes,
                "--launcher", launcher, "--out", str(run_dir), *extra, "--", "python", "train.py")
    assert result.code == 0, result.err
    plan = json.loads((run_dir / "plan.json").read_text())
    line = plan["launch"]["line"]
    assert f"--rdzv-conf join_timeout={rendezvous_timeout(int(nodes))}" in line and "--rdzv-backend c10d" in line
    return [n for n in plan["launch"]["notes"] if "2.4" in n]


def test_the_timeout_grows_with_the_nodes_up_to_its_cap() -> None:
    assert [rendezvous_timeout(n) for n in (2, 16, 512, 1200, 4096)] == [602, 616, 1112, 1800, 1800]


@pytest.mark.parametrize("launcher", ["torchrun", "megatron"])
def test_a_torch_below_2_4_at_large_cluster_is_a_plan_note(ck, tmp_path: Path, launcher: str) -> None:
    venv = fake_venv(tmp_path / "venv", "2.3.1+cu121")
    extra = ("--set", "tp=2", "--set", "pp=2") if launcher == "megatron" else ()
    (note,) = notes(ck, tmp_path, "large-cluster", "16", "--venv", str(venv), *extra, launcher=launcher)
    assert "torch 2.3.1+cu121" in note and "no libuv server" in note and "16 nodes" in note


@pytest.mark.parametrize("stage,nodes,versions", [
    ("large-cluster", "16", ("2.4.0a0+07cecf4",)),   # 2.4 itself: no note
    ("large-cluster", "16", ()),                     # a venv without torch: not known
    ("large-cluster", "16", ("2.3.1", "2.5.1")),     # two torches: not known which
    ("multi-node", "4", ("2.3.1",)),                 # below 2.4 at 4 nodes: no matter
])
def test_no_note_where_the_floor_is_met_or_not_known(ck, tmp_path: Path, stage: str, nodes: str,
                                                    versions: tuple[str, ...]) -> None:
    venv = fake_venv(tmp_path / "venv", *versions)
    venv.mkdir(exist_ok=True)
    assert notes(ck, tmp_path, stage, nodes, "--venv", str(venv)) == []


def test_the_version_read_and_compared(tmp_path: Path) -> None:
    assert installed(str(fake_venv(tmp_path / "a", "2.3.1+cu121"))) == "2.3.1+cu121"
    assert installed(str(tmp_path / "missing")) is None and installed(None) is None
    bad = fake_venv(tmp_path / "b", "2.3.1")
    meta = next(bad.glob("lib/*/site-packages/*/METADATA"))
    meta.write_text("Version: $(id)\n")          # not a version: not known
    assert installed(str(bad)) is None
    assert below("2.3.1+cu121", (2, 4)) and not below("2.4.0a0", (2, 4)) and not below("10.0", (2, 4))
