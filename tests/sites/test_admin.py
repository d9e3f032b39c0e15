"""The admin commands' pure code (sites/create.py, drift.py, writer.py) without root and without
a live Slurm: through their seams, ``run`` (a Slurm client command -> its text) answered with
scontrol output captured from Slurm 22.05.8 (tests/data/sites/slurm-22.05, see its README), and
``runner_for`` given the real local transport running the probe script against an SSH-lab node
profile (tests/sshlab/profiles: sysfs and mount tree, and the profile's nvidia-smi stand-in)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from clusterkit.config.load import load_file
from clusterkit.errors import InputError, SlurmUnreachable
from clusterkit.nodes.transport import LocalRunner
from clusterkit.sites import admin
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "sites" / "slurm-22.05"
PROFILE = REPO / "tests" / "sshlab" / "profiles" / "healthy"
CAPTURED = {
    ("scontrol", "show", "config"): "show-config.txt",
    ("scontrol", "show", "partition", "-o"): "show-partition-o.txt",
    ("scontrol", "show", "node", "-o"): "show-node-o.txt",
}


def slurm(nodes: str = "show-node-o.txt", calls: list[tuple[str, ...]] | None = None) -> Any:
    """The ``run`` seam answered from the captured files (``nodes``: which node listing)."""
    def run(argv: Sequence[str]) -> str:
        key = tuple(argv)
        if calls is not None:
            calls.append(key)
        name = nodes if key == ("scontrol", "show", "node", "-o") else CAPTURED[key]
        return (DATA / name).read_text()
    return run


def lab_runner(site: Any, transport: str) -> LocalRunner:
    """Every node is this machine with the 'healthy' profile's files (the real local transport)."""
    env = {**os.environ, "CLUSTERKIT_SYSROOT": str(PROFILE / "root"),
           "PATH": f"{PROFILE / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    return LocalRunner(command_timeout_s=30, env=env)


def test_init_drafts_a_valid_site_from_captured_scontrol() -> None:
    calls: list[tuple[str, ...]] = []
    draft = admin.init_site("tb", partition=None, nodes=None, probe_with=None, run=slurm(calls=calls))
    assert calls == list(CAPTURED)               # three calls, config first
    text = draft.text
    for line in ('partition: "debug"', 'nodelist: "node[1-4]"', "gpus_per_node: 8", "cpus_per_node: 8",
                 'cluster: "testbed"', "mem_gb: 62.5"):
        assert line in text, (line, text)
    assert draft.missing                         # what Slurm cannot tell (fabric, storage) is listed


def test_init_with_probe_reads_node_facts_through_the_local_transport() -> None:
    draft = admin.init_site("tb", partition="debug", nodes="node[1-2]", probe_with="srun", run=slurm(),
                            runner_for=lab_runner)
    assert draft.unreachable == {}
    assert "gpu_model: NVIDIA H100 80GB HBM3" in draft.text or "H100" in draft.text, draft.text
    assert "infiniband" in draft.text and "/lustre" in draft.text, draft.text


def test_init_refuses_an_unknown_partition_and_an_unreachable_controller() -> None:
    with pytest.raises(InputError, match="partition 'gpu' does not exist"):
        admin.init_site("tb", partition="gpu", nodes=None, probe_with=None, run=slurm())

    def down(argv: Sequence[str]) -> str:
        raise SlurmUnreachable("cannot reach Slurm controller: connect failure")

    with pytest.raises(SlurmUnreachable):
        admin.init_site("tb", partition=None, nodes=None, probe_with=None, run=down)


@pytest.fixture
def stale_site(tmp_path: Path) -> Path:
    """The testbed site with two facts that no longer hold (GPUs and CPUs per node)."""
    text = (REPO / "site_configs" / "testbed.yaml").read_text()
    text = text.replace("gpus_per_node: 8 ", "gpus_per_node: 4 ").replace("cpus_per_node: 8", "cpus_per_node: 16")
    path = tmp_path / "stale.yaml"
    path.write_text(text)
    return path


def test_drift_finds_the_changed_facts_and_node_states(stale_site: Path) -> None:
    result = admin.drift_sites([str(stale_site)], run=slurm("show-node-o-down-drain.txt"))
    (report,) = result.reports
    keys = {d.key for d in report.drift}
    assert {"nodes.gpus_per_node", "nodes.cpus_per_node"} <= keys, report.drift
    assert [(s.nodes, s.state, s.reason) for s in report.node_state] == \
        [("node2", "DOWN", "test"), ("node3", "IDLE+DRAIN", "bad gpu")]       # the nodes Slurm holds out
    assert result.exit_code == 1
    assert all(d.file == str(stale_site) and d.line for d in report.drift)   # file:line for each


def test_drift_write_edits_only_the_facts_and_keeps_the_rest(stale_site: Path) -> None:
    before = stale_site.read_text()
    dry = admin.drift_sites([str(stale_site)], dry_run=True, run=slurm())
    assert stale_site.read_text() == before                         # --dry-run writes nothing
    (diff,) = dry.diffs.values()
    assert "-  gpus_per_node: 4" in diff and "+  gpus_per_node: 8" in diff
    admin.drift_sites([str(stale_site)], write=True, run=slurm())
    after = stale_site.read_text()
    site = load_file(str(stale_site))                               # still a valid site
    assert (site.nodes.gpus_per_node, site.nodes.cpus_per_node) == (8, 8)
    assert after.splitlines()[:4] == before.splitlines()[:4]        # comments kept
    assert admin.drift_sites([str(stale_site)], run=slurm()).exit_code == 0


def test_drift_with_the_controller_down_is_exit_3(stale_site: Path) -> None:
    def down(argv: Sequence[str]) -> str:
        raise SlurmUnreachable("cannot reach Slurm controller: connect failure")

    assert admin.drift_sites([str(stale_site)], run=down).exit_code == 3


# --- a published capture: cores reserved for the system (CoreSpecCount) --------------------------

DCCN = REPO / "tests" / "data" / "sites" / "public" / "show-node-dccn-corespec-22.05.10.txt"


def dccn_slurm(argv: Sequence[str]) -> str:
    """The nodes from the DCCN capture (CPUEfctv=63 CPUTot=64); the config from the testbed's, and
    no partition listing (that cluster's was not published), so the draft covers all nodes."""
    key = tuple(argv)
    if key == ("scontrol", "show", "node", "-o"):
        return DCCN.read_text()
    if key == ("scontrol", "show", "partition", "-o"):
        return ""
    return (DATA / CAPTURED[key]).read_text()


def test_init_and_drift_take_cpuefctv_over_cputot(tmp_path: Path) -> None:
    draft = admin.init_site("dccn", partition=None, nodes=None, probe_with=None, run=dccn_slurm)
    line = next(ln for ln in draft.text.splitlines() if "cpus_per_node" in ln)
    assert "cpus_per_node: 63" in line and "CPUTot=64" in line, line
    # Gres=gpu:nvidia_a100-sxm4-40gb:4: the token nvidia-smi's "NVIDIA A100-SXM4-40GB" holds, unverified
    line = next(ln for ln in draft.text.splitlines() if "gpu_model" in ln)
    assert 'gpu_model: "A100"' in line and "# unverified: from GRES type nvidia_a100-sxm4-40gb" in line, line
    assert any(u.startswith("nodes.gpu_model: from GRES type") for u in draft.unverified)
    # MemSpecLimit=4096 of RealMemory=515578 MB is the system's: jobs get 511482 MB, 499.5 GB
    line = next(ln for ln in draft.text.splitlines() if "mem_gb" in ln)
    assert "mem_gb: 499.5" in line and "MemSpecLimit=4096" in line, line
    site = tmp_path / "dccn.yaml"
    site.write_text(draft.text)
    (report,) = admin.drift_sites([str(site)], run=dccn_slurm).reports
    assert "nodes.cpus_per_node" not in {d.key for d in report.drift}, report.drift   # 63 is right
    assert "nodes.mem_gb" not in {d.key for d in report.drift}, report.drift          # 499.5 is right
    assert "nodes.gpu_model" not in {d.key for d in report.drift}, report.drift
    site.write_text(draft.text.replace("cpus_per_node: 63", "cpus_per_node: 64"))
    (report,) = admin.drift_sites([str(site)], run=dccn_slurm).reports
    cpus, = [d for d in report.drift if d.key == "nodes.cpus_per_node"]
    assert (cpus.configured, cpus.live, cpus.nodes) == (64, 63, "dccn-c[083-084]"), cpus


RASPI = REPO / "tests" / "data" / "sites" / "public" / "show-node-raspi-realmemory1-21.08.5.txt"


def test_realmemory_1_is_a_listed_placeholder_not_a_silent_default(tmp_path: Path) -> None:
    """Slurm 21.08.5 nodes whose slurm.conf sets no RealMemory print ``RealMemory=1``."""
    def run(argv: Sequence[str]) -> str:
        key = tuple(argv)
        if key == ("scontrol", "show", "node", "-o"):
            return RASPI.read_text()
        return "" if key == ("scontrol", "show", "partition", "-o") else (DATA / CAPTURED[key]).read_text()

    draft = admin.init_site("pi", partition=None, nodes=None, probe_with=None, run=run)
    line = next(ln for ln in draft.text.splitlines() if "mem_gb" in ln)
    assert line.lstrip().startswith("# mem_gb:") and "RealMemory=1" in line, line
    assert "nodes.mem_gb: Slurm has no memory configured for these nodes (RealMemory=1)" in draft.missing
    site = tmp_path / "pi.yaml"
    site.write_text(draft.text.replace("# mem_gb: 256", "mem_gb: 8"))
    (report,) = admin.drift_sites([str(site)], run=run).reports
    assert "nodes.mem_gb" not in {d.key for d in report.drift}
    assert "Slurm has no memory configured (RealMemory=1) on slurm-worker-[1-2]: nodes.mem_gb not checked " \
           "against Slurm there" in report.notes


def test_mig_gres_counts_the_whole_gpus_and_names_their_model() -> None:
    """The captured 22.05 record with its Gres replaced by a MIG layout (4 A100, 7 slices of 10 GB)."""
    record = (DATA / "show-node-o-typed.txt").read_text()
    mig = re.sub(r"Gres=\S+", "Gres=gpu:a100:4,gpu:1g.10gb:7", record)
    draft = admin.init_site("mig", partition=None, nodes=None, probe_with=None,
                            run=lambda argv: mig if tuple(argv) == ("scontrol", "show", "node", "-o")
                            else (DATA / CAPTURED[tuple(argv)]).read_text())
    assert re.search(r"gpus_per_node: 4 +# Gres=gpu:a100:4,gpu:1g.10gb:7", draft.text), draft.text
    assert re.search(r'gpu_model: "A100" +# unverified: from GRES type a100', draft.text), draft.text
