"""``clusterkit preflight --transport srun`` on the Slurm test cluster: outside an allocation
(srun asks for one) and inside one, as the rendered job script's first step runs it."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from ..conftest import CLI
from .conftest import REPO, Testbed

PROFILE = REPO / "tests" / "sshlab" / "profiles" / "healthy"

SITE = """\
name: srun-lab
scheduler: {kind: slurm, partition: debug}
nodes: {nodelist: "node[1-4]", gpus_per_node: 8, gpu_model: H100}
ssh: {command_timeout_s: 20}
software: {driver_min: "535.104", cuda: "12.4"}
network:
  fabric: infiniband
  hcas: [mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7]
  port_rate_gbps: 400
storage:
  - {path: /lustre/scratch, type: lustre, min_free_gb: 0.001, use: [data, checkpoints], timeout_s: 5}
"""


def _site(tmp_path: Path) -> Path:
    path = tmp_path / "srun-lab.yaml"
    path.write_text(SITE)
    return path


def _fake_node_env(bed: Testbed, tmp_path: Path) -> dict[str, str]:
    """srun exports our environment to every task: the healthy profile's tools and sysroot."""
    root = tmp_path / "root"
    shutil.copytree(PROFILE / "root", root)
    env = bed.env(login=True)
    env["PATH"] = f"{PROFILE / 'bin'}:{env['PATH']}"
    env["CLUSTERKIT_SYSROOT"] = str(root)
    return env


def test_srun_transport_checks_every_node(ck: CLI, testbed: Testbed, tmp_path: Path) -> None:
    site = _site(tmp_path)
    proc = ck.proc("preflight", "--site", str(site), "--transport", "srun", "--json",
                   env=_fake_node_env(testbed, tmp_path), timeout=120)
    assert proc.code == 0, proc.out + proc.err
    report = json.loads(proc.out)
    assert report["transport"] == "srun" and report["stage"] == "multi-node"
    assert report["groups"] == [{"status": "ok", "count": 4, "nodes": "node[1-4]", "lines": []}]


def test_srun_transport_without_gpus_everywhere_marks_no_node_bad(ck: CLI, testbed: Testbed, tmp_path: Path) -> None:
    """nvidia-smi missing on every node is the site's environment, not two bad nodes: both are
    unjudged, in one line with the cause (before: FAILED 2 nodes, each excluded)."""
    site = _site(tmp_path)
    proc = ck.proc("preflight", "--site", str(site), "--transport", "srun", "--nodelist", "node[1-2]",
                   "--stage", "single-node", env=testbed.env(login=True), timeout=120)
    assert proc.code == 1, proc.out + proc.err
    [line] = [ln for ln in proc.out.splitlines() if not ln.startswith(("note:", "preflight "))]
    assert line.startswith("UNJUDGED    2 nodes (node[1-2]): the check failed on all 2 nodes alike: gpu.present: "
                           "nvidia-smi not found (no NVIDIA driver installed?)"), proc.out
    assert line.endswith("a fault of the check or its environment, not of the nodes; no node is marked bad"), line
    assert "FAILED" not in proc.out


def test_in_job_step_inside_an_allocation(ck: CLI, testbed: Testbed, tmp_path: Path) -> None:
    """What a job script's preflight step does: check the allocated nodes, stop on failure."""
    site = _site(tmp_path)
    # the step line a job script has: clusterkit's own command line, the allocation's nodes
    step = (shlex.join(ck.argv("preflight", "--site", str(site), "--transport", "srun"))
            + ' --nodes "$SLURM_JOB_NODELIST" --json')
    proc = subprocess.run(["salloc", "--nodes", "2", "--nodelist", "node[3-4]", "--quiet", "bash", "-c", step],
                          env=_fake_node_env(testbed, tmp_path), capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert [n["host"] for n in report["nodes"]] == ["node3", "node4"]
    assert {n["status"] for n in report["nodes"]} == {"ok"}


def test_a_node_whose_task_never_answers_fails_the_run(ck: CLI, testbed: Testbed, tmp_path: Path) -> None:
    """A node that kills its task's wrapper (so srun never hears its exit status) is a failed
    node: exit 3, never "passed", never left out of the report."""
    from ..hostile.test_srun import KILL_WRAPPER

    site = _site(tmp_path)
    env = _fake_node_env(testbed, tmp_path)
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f'#!/bin/bash\nif [ "$SLURMD_NODENAME" = node2 ]; then\n{KILL_WRAPPER}fi\n'
                   f'exec {PROFILE / "bin" / "nvidia-smi"} "$@"\n')
    smi.chmod(0o755)
    env["PATH"] = f"{smi.parent}:{env['PATH']}"
    proc = ck.proc("preflight", "--site", str(site), "--transport", "srun", "--nodelist", "node[1-3]", "--json",
                   env=env, timeout=120)
    assert proc.code == 3, proc.out + proc.err
    report = json.loads(proc.out)
    assert {n["host"]: n["status"] for n in report["nodes"]} == {"node1": "ok", "node2": "unreachable",
                                                                "node3": "ok"}, report


PROFILES = REPO / "tests" / "sshlab" / "profiles"
# each run: node -> lab profile.  A node whose counters rise runs alone: the testbed's nodes
# share one sysroot, so another node reading while it takes errors would see them too.
HEALTH_RUNS = [
    {"node1": "healthy", "node2": "remap_pending", "node3": "xid79", "node4": "pcie_x8"},
    {"node1": "nvlink_down", "node2": "healthy"},
    {"node3": "ib_symbol_errors"},
]
HEALTH_FAILS = {
    "remap_pending": {"gpu.row_remap": "GPU 00000000:86:00.0: row remapping pending (reset the GPU)"},
    "xid79": {"gpu.xid": "Xid 79 on GPU 0000:91:00: GPU has fallen off the bus (PCIe link lost)"},
    "pcie_x8": {"gpu.pcie": "GPU 00000000:A8:00.0: PCIe x8 of x16"},
    "nvlink_down": {"gpu.nvlink": "GPU 2: link 7 inactive"},
    "ib_symbol_errors": {"ib.counters": "error counters rising: mlx5_2 port 1: symbol_error +7 in 2 s"},
    "healthy": {},
}


def _per_node_tools(tmp_path: Path, run: dict[str, str]) -> Path:
    """Stand-ins of nvidia-smi, dmesg and sleep that run the lab profile's tool of the node
    they run on (``$SLURMD_NODENAME``); a profile without its own sleep gets the real one."""
    bin_dir = tmp_path / "per-node-bin"
    bin_dir.mkdir()
    for tool in ("nvidia-smi", "dmesg", "sleep"):
        cases = "".join(f'  {node}) p={PROFILES / profile / "bin" / tool} ;;\n' for node, profile in run.items())
        fallback = "/bin/sleep" if tool == "sleep" else str(PROFILES / "healthy" / "bin" / tool)
        script = (f'#!/bin/bash\n# stand-in: the lab profile\'s {tool} of the node this runs on\n'
                  f'p=\ncase "$SLURMD_NODENAME" in\n{cases}esac\n'
                  f'[ -x "$p" ] || p={fallback}\nexec "$p" "$@"\n')
        (bin_dir / tool).write_text(script)
        (bin_dir / tool).chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("run", HEALTH_RUNS, ids=["remap-xid-x8", "nvlink", "symbol-errors"])
def test_srun_health_checks_name_each_faulty_node(ck: CLI, testbed: Testbed, tmp_path: Path,
                                                  run: dict[str, str]) -> None:
    site = _site(tmp_path)
    env = _fake_node_env(testbed, tmp_path)
    env["PATH"] = f"{_per_node_tools(tmp_path, run)}:{env['PATH']}"
    proc = ck.proc("preflight", "--site", str(site), "--transport", "srun", "--nodelist", ",".join(run),
                   "--stage", "multi-node", "--json", env=env, timeout=120)
    report = json.loads(proc.out)
    got = {n["host"]: {c["check"]: c["message"] for c in n["checks"] if c["status"] == "fail"}
           for n in report["nodes"]}
    assert got == {node: HEALTH_FAILS[profile] for node, profile in run.items()}, proc.out + proc.err
    assert proc.code == (1 if any(HEALTH_FAILS[p] for p in run.values()) else 0)


def test_a_drained_node_is_named_and_skipped_and_the_rest_checked(ck: CLI, testbed: Testbed, tmp_path: Path) -> None:
    """Before: srun waited for the drained node (95 s) and then called its healthy neighbour
    unreachable too.  Now the drained node is said so, not asked, and the rest is checked."""
    site, env = _site(tmp_path), _fake_node_env(testbed, tmp_path)
    testbed.wait_idle()
    testbed.run("scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=ck-drain-test")
    try:
        proc = ck.proc("preflight", "--site", str(site), "--transport", "srun", "--nodelist", "node[1-2]", "--json",
                       env=env, timeout=120)
        text = ck.proc("preflight", "--site", str(site), "--transport", "srun", "--nodelist", "node[1-2]",
                       env=env, timeout=120)
    finally:
        testbed.resume("node2")
    report = json.loads(proc.out)
    assert proc.code == 3, proc.out + proc.err
    nodes = {n["host"]: n for n in report["nodes"]}
    # a step that named node2 would wait for it and end with node1 unreachable too: node1 ok and
    # node2 not asked are the states that show it, not how long the preflight took
    assert nodes["node1"]["status"] == "ok", nodes["node1"]
    assert nodes["node2"]["status"] == "unreachable" and nodes["node2"]["error_kind"] == "unavailable"
    assert nodes["node2"]["error"].startswith("drained in Slurm (State=IDLE+DRAIN, Reason=ck-drain-test): not checked")
    assert nodes["node2"]["checks"] == [], nodes["node2"]
    assert "UNREACHABLE node2: drained in Slurm" in text.out and "OK          node1" in text.out, text.out
