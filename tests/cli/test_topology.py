"""The site key ``network.topology``: checked at its line (a plugin's keys only with that plugin),
rendered as ``#SBATCH --switches=N@T`` (topology/tree) or ``--segment=S`` (topology/block) for a
Slurm job of more than one node, owned (a site's ``scheduler.sbatch`` and a job's ``--sbatch`` may
not set them), and the job script's step that orders the hosts by switch on the batch host."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, assert_one_line_error


def _site(tmp_path: Path, topo: str, extra: str = "") -> str:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\nnetwork:\n"
                    f"  topology: {topo}\n{extra}")
    return str(path)


@pytest.mark.parametrize("topo,needle", [
    ("{plugin: tree, segment: 4}", "segment is topology/block's (--segment)"),
    ("{plugin: block, max_switches: 1}", "max_switches and max_wait are topology/tree's"),
    ("{plugin: tree, max_wait: 5}", "give max_switches too"),
    ('{plugin: tree, max_switches: 1, max_wait: "5 min"}', "max_wait"),
    ("{plugin: tree, max_switches: 0}", "max_switches"),
    ("{plugin: dragonfly}", "network.topology.plugin"),
    ("{max_switches: 1}", "network.topology.plugin"),
    ("{plugin: tree, max_switches: 1, max_wait: 0}", "network.topology.max_wait"),
])
def test_a_bad_topology_is_refused_at_its_line(ck, tmp_path: Path, topo: str, needle: str) -> None:
    result = ck("sites", "validate", _site(tmp_path, topo))
    assert_one_line_error(result, 2, "s.yaml:", "network.topology", needle)


def _script(ck, site: str, tmp_path: Path, *args: str) -> str:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    result = ck("render", "--site", site, *args, "--out", str(out), "--", "python", "train.py")
    assert result.code == 0, result.err
    return (out / "job.sbatch").read_text()


@pytest.mark.parametrize("topo,line", [
    ('{plugin: tree, max_switches: 1, max_wait: "00:05:00"}', "#SBATCH --switches=1@00:05:00\n"),
    ("{plugin: tree, max_switches: 2, max_wait: 10}", "#SBATCH --switches=2@10\n"),
    ("{plugin: tree, max_switches: 1}", "#SBATCH --switches=1\n"),
    ("{plugin: block, segment: 2}", "#SBATCH --segment=2\n"),
])
def test_the_placement_is_an_sbatch_line(ck, tmp_path: Path, topo: str, line: str) -> None:
    script = _script(ck, _site(tmp_path, topo), tmp_path, "--nodes", "2", "--launcher", "deepspeed")
    assert script.count(line) == 1
    # the hosts are ordered by switch before the head, the node list and the hostfile are taken from them
    order = script.index("-m clusterkit.supervise.hostorder")
    assert "export CK_TOPOLOGY=" in script
    assert order < script.index("CK_HEAD=${ck_allocation%%") < script.index('export CK_HOSTFILE=')


def test_one_node_asks_for_no_placement(ck, tmp_path: Path) -> None:
    script = _script(ck, _site(tmp_path, "{plugin: tree, max_switches: 1}"), tmp_path, "--nodes", "1")
    assert "--switches" not in script and "clusterkit.supervise.hostorder" not in script


def test_a_node_count_off_the_segment_is_refused(ck, tmp_path: Path) -> None:
    result = ck("render", "--site", _site(tmp_path, "{plugin: block, segment: 4}"), "--nodes", "2",
                "--", "python", "train.py")
    assert_one_line_error(result, 2, "2 nodes are no multiple of network.topology.segment 4")


@pytest.mark.parametrize("how", ["scheduler:\n  sbatch: {switches: 2}\n", ""])
def test_switches_and_segment_are_clusterkits_own(ck, tmp_path: Path, how: str) -> None:
    if how:
        result = ck("sites", "validate", _site(tmp_path, "{plugin: tree}", how))
        assert_one_line_error(result, 2, "scheduler.sbatch", "network.topology.max_switches")
    else:
        result = ck("render", "--site", _site(tmp_path, "{plugin: block}"), "--nodes", "2", "--sbatch", "segment=2",
                    "--", "python", "train.py")
        assert_one_line_error(result, 2, "--segment", "network.topology.segment")
