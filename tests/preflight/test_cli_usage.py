"""``clusterkit preflight`` bad input (exit 2, one line) and the local transport on this machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import CLI

SITE = """\
name: usage
nodes: {nodelist: "gpu[01-04]", gpus_per_node: 8}
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    path = tmp_path / "usage.yaml"
    path.write_text(SITE)
    return path


@pytest.mark.parametrize(
    "args,message",
    [
        ((), "clusterkit: error: preflight needs --site SITE or $CLUSTERKIT_SITE "
             "(a site config path or name; see `clusterkit sites list`)"),
        (("--stage", "huge"),
         "clusterkit: error: --stage 'huge': choose one of single-node, multi-node, large-cluster"),
        (("--transport", "telnet"), "clusterkit: error: --transport 'telnet': choose one of ssh, srun, local"),
        (("--nodelist", "gpu[01-"), "clusterkit: error: --nodelist: bad hostlist 'gpu[01-':"),
        (("--transport", "local", "--nodelist", "a,b"),
         "clusterkit: error: --nodelist 'a,b' names 2 hosts; transport local checks this machine only"),
        (("--nodelist", "a", "--nodes", "a"), "clusterkit: error: give --nodelist only (--nodes is its old spelling)"),
        (("--perf", "--transport", "ssh"),
         "clusterkit: error: --transport 'ssh': --perf runs one srun step over the nodes: use --transport srun"),
        (("--perf", "--stage", "huge"),
         "clusterkit: error: --stage 'huge': choose one of single-node, multi-node, large-cluster"),
        (("--perf", "--nodelist", "gpu[01-"), "clusterkit: error: --nodelist: bad hostlist 'gpu[01-':"),
    ],
)
def test_usage_errors_exit_2_with_one_line(ck: CLI, site: Path, args: tuple[str, ...], message: str) -> None:
    full = args if args == () else ("--site", str(site), *args)
    proc = ck("preflight", *full)
    assert proc.code == 2
    assert proc.out == ""
    assert len(proc.err.splitlines()) == 1 and proc.err.startswith(message), proc.err


def test_bad_site_file_exit_2(ck: CLI, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnodes: {nodelist: 'x[1-2]', gpus_per_node: 8, colour: blue}\n")
    proc = ck("preflight", "--site", str(bad))
    assert proc.code == 2 and "Traceback" not in proc.err
    assert proc.err.startswith(f"clusterkit: error: {bad}:2: nodes.colour:")


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_local_transport_on_this_machine_reports_missing_gpus(ck: CLI, site: Path) -> None:
    proc = ck("preflight", "--site", str(site), "--transport", "local", "--json")
    assert proc.code == 1, proc.err
    report = json.loads(proc.out)
    node, = report["nodes"]
    assert report["transport"] == "local" and report["stage"] == "single-node"
    assert node["status"] == "failed"
    assert [c["message"] for c in node["checks"] if c["status"] == "fail"] == [
        "nvidia-smi not found (no NVIDIA driver installed?)"]
    plain = ck("preflight", "--site", str(site), "--transport", "local", "--nodelist", "thisbox")
    assert plain.code == 1
    assert ("FAILED      thisbox: gpu.present: nvidia-smi not found (no NVIDIA driver installed?)"
            in plain.out.splitlines())


def test_the_old_nodes_spelling_still_works_with_a_warning(ck: CLI, site: Path) -> None:
    """--nodes is a number of nodes in submit, render and plan; here it named hosts, so it is
    --nodelist now, and the old spelling is kept for a while with a warning."""
    old = ck("preflight", "--site", str(site), "--transport", "local", "--nodes", "thisbox", "--json")
    new = ck("preflight", "--site", str(site), "--transport", "local", "--nodelist", "thisbox", "--json")
    assert old.code == new.code == 1
    assert [n["host"] for n in json.loads(old.out)["nodes"]] == ["thisbox"]
    assert old.err.splitlines() == ["clusterkit: warning: --nodes thisbox is deprecated here: say --nodelist thisbox "
                                    "(--nodes is a number of nodes in submit, render and plan)"]
    assert new.err == ""
    assert "--nodelist NODESET" in ck("preflight", "--help").out
    assert "--nodes" not in ck("preflight", "--help").out
