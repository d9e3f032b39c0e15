"""Per-process logs at scale (site keys ``logs.debug_max_nodes``/``logs.node_local_dir``):
``--debug`` above the limit needs ``--debug-nodes``, the nodes not named go back to WARN in a
real bash, and torchrun keeps its per-rank files per job and restart, node-local above the limit."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shared_site

SMALL = "logs: {debug_max_nodes: 4, node_local_dir: /local/scratch}\n"


def site(tmp_path: Path, extra: str = SMALL, base: str = "ib-h100") -> Path:
    sites = tmp_path / "sites"
    path = shared_site(sites, base, tmp_path)
    child = sites / f"x{len(list(sites.iterdir()))}.yaml"
    child.write_text(f"extends: {path}\n{extra}")
    return child


@dataclass
class Rendered:
    code: int
    err: str
    run_dir: Path


def render(ck: Any, path: Path, tmp_path: Path, *args: str) -> Rendered:
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
    result = ck("render", "--site", str(path), *args, "--out", str(out), "--", "python", "t.py")
    return Rendered(result.code, result.err, out)


def test_debug_above_the_limit_writes_each_node_s_nccl_files_on_its_own_disk(ck: Any, tmp_path: Path) -> None:
    result = render(ck, site(tmp_path), tmp_path, "--nodes", "8", "--debug")
    assert result.code == 0, result.err
    job = (result.run_dir / "job.sbatch").read_text()
    assert "case \"${SLURMD_NODENAME" not in job   # every node logs INFO, into its own folder
    m = re.search(r"^export NCCL_DEBUG_FILE=(.+)$", job, re.M)
    assert m and _expand(m.group(1), "gpu003", "2") == "/local/scratch/clusterkit-nccl-55.r2.%h.%p.log", job
    env = {e["name"]: e for e in json.loads((result.run_dir / "plan.json").read_text())["env"]}
    assert env["NCCL_DEBUG"]["value"] == "INFO" and "copies the files of the node" in env["NCCL_DEBUG_FILE"]["reason"]
    # at the limit, as before: every node logs
    ok = render(ck, site(tmp_path), tmp_path, "--nodes", "4", "--debug")
    assert ok.code == 0, ok.err
    assert "case \"${SLURMD_NODENAME" not in (ok.run_dir / "job.sbatch").read_text()


@pytest.mark.parametrize(("nodeset", "says"), [
    ("gpu[001,099]", "--debug-nodes: gpu099: not in "),
    ("gpu[001-005]", "--debug-nodes names 5 nodes, more than the site's logs.debug_max_nodes (4)"),
    ("gpu[001-", "--debug-nodes: "),
    ("gpu001 gpu002", "--debug-nodes: "),
])
def test_bad_debug_nodes_is_one_line(ck: Any, tmp_path: Path, nodeset: str, says: str) -> None:
    result = render(ck, site(tmp_path), tmp_path, "--nodes", "8", "--debug-nodes", nodeset)
    assert result.code == 2 and not result.run_dir.exists()
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    assert says in result.err, result.err


def test_debug_nodes_refused_where_one_process_starts_every_node(ck: Any, tmp_path: Path) -> None:
    result = render(ck, site(tmp_path, SMALL, "eth-nfs"), tmp_path, "--nodes", "2", "--launcher", "mpirun",
                    "--set", "max_restarts=0", "--debug-nodes", "node01")
    assert result.code == 2 and result.err.count("\n") == 1
    assert "--debug-nodes: this launcher starts every node's ranks itself" in result.err, result.err


def _filter(job: str) -> str:
    m = re.search(r"case \"\$\{SLURMD_NODENAME:-\$\(hostname -s\)\}\" in .*? esac; ", job)
    assert m, "no node filter in the launch body"
    return m.group(0)


def test_debug_nodes_keep_info_only_on_those_nodes_in_bash(ck: Any, tmp_path: Path) -> None:
    result = render(ck, site(tmp_path), tmp_path, "--nodes", "8", "--debug-nodes", "gpu[002,007]",
                    "--launcher", "torchrun", "--set", "container=false")
    assert result.code == 0, result.err
    job = (result.run_dir / "job.sbatch").read_text()
    exports = "".join(ln + "\n" for ln in job.splitlines()
                      if ln.startswith(("export NCCL_DEBUG=", "export NCCL_DEBUG_SUBSYS=", "export NCCL_DEBUG_FILE=")))
    assert exports.count("export ") == 3    # --debug-nodes implies --debug
    show = 'printf "%s|%s|%s\\n" "$NCCL_DEBUG" "${NCCL_DEBUG_FILE-unset}" "${NCCL_DEBUG_SUBSYS-unset}"'
    seen = {}
    for node in ("gpu002", "gpu007", "gpu003", "gpu0022"):
        seen[node] = subprocess.run(["bash", "-c", exports + _filter(job) + show], capture_output=True, text=True,
                                    env={"SLURMD_NODENAME": node, "CK_JOB_ID": "77"}, check=True).stdout.strip()
    assert seen["gpu002"] == seen["gpu007"] == \
        f"INFO|{result.run_dir}/logs/nccl-77.r0.%h.%p.log|INIT,BOOTSTRAP,ENV,NET,GRAPH"
    assert seen["gpu003"] == seen["gpu0022"] == "WARN|unset|unset"
    env = {e["name"]: e for e in json.loads((result.run_dir / "plan.json").read_text())["env"]}
    assert "on gpu[002,007] only, --debug-nodes" in env["NCCL_DEBUG"]["reason"]


def test_debug_nodes_limit_is_a_site_key(ck: Any, tmp_path: Path) -> None:
    bad = site(tmp_path, "logs: {debug_max_nodes: 0}\n")
    result = ck("sites", "validate", str(bad))
    assert result.code == 2 and "logs.debug_max_nodes" in result.err and f"{bad.name}:" in result.err
    rel = site(tmp_path, "logs: {node_local_dir: scratch}\n")
    result = ck("sites", "validate", str(rel))
    assert result.code == 2 and "logs.node_local_dir" in result.err and "an absolute, normalized path" in result.err


def _log_dir(job: str) -> str:
    m = re.search(r"--tee 3 --log-dir (\S+) ", job)
    assert m, "torchrun has no --log-dir"
    return m.group(1)


def _expand(word: str, node: str, restart: str) -> str:
    return subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, text=True, check=True,
                          env={"CK_JOB_ID": "55", "SLURM_RESTART_COUNT": restart, "SLURMD_NODENAME": node}).stdout


@pytest.mark.parametrize("launcher", ["torchrun", "megatron"])
def test_torchrun_rank_logs_per_restart_and_node_local_at_scale(ck: Any, tmp_path: Path, launcher: str) -> None:
    path = site(tmp_path)
    small = render(ck, path, tmp_path, "--nodes", "4", "--launcher", launcher, "--set", "container=false")
    big = render(ck, path, tmp_path, "--nodes", "8", "--launcher", launcher, "--set", "container=false")
    assert small.code == big.code == 0, small.err + big.err
    # each node's bash expands the folder for itself: the run's logs up to the limit, its own disk above it
    word = _log_dir((small.run_dir / "job.sbatch").read_text().split("bash -c ", 1)[1].split("\n", 1)[0]
                    .replace("'\"'\"'", "'"))
    assert _expand(word, "gpu003", "2") == f"{small.run_dir}/logs/torchrun-55.r2/gpu003"
    word = _log_dir((big.run_dir / "job.sbatch").read_text())
    assert _expand(word, "gpu003", "0") == "/local/scratch/clusterkit-55.r0"
    for out in (small.run_dir, big.run_dir):
        env = {e["name"]: e["value"] for e in json.loads((out / "plan.json").read_text())["env"]}
        assert env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]: "
        assert "export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]: '" in (out / "job.sbatch").read_text()


@pytest.mark.parametrize("own", [["--tee", "1"], ["--log-dir=/x"], ["-r3"]])
def test_the_jobs_own_torchrun_log_flags_win(ck: Any, tmp_path: Path, own: list[str]) -> None:
    result = render(ck, site(tmp_path), tmp_path, "--nodes", "2", "--launcher", "torchrun",
                    "--set", "container=false", *(f"--launcher-arg={w}" for w in own))
    assert result.code == 0, result.err
    job = (result.run_dir / "job.sbatch").read_text()
    assert "--tee 3" not in job and "--log-dir /" not in job and "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE" not in job
    assert " ".join(own) in job


def test_the_python_api_takes_debug_nodes(tmp_path: Path) -> None:
    import clusterkit

    s = clusterkit.Site.load(site(tmp_path))
    with pytest.raises(clusterkit.InputError) as bad:
        s.plan(["python", "t.py"], nodes=8, debug_nodes="gpu[1-")
    assert bad.value.field == "debug_nodes"
    local = s.plan(["python", "t.py"], nodes=8, debug=True).render(write=False)
    assert {v.name: v.value for v in local.plan.env}["NCCL_DEBUG_FILE"].startswith("/local/scratch/clusterkit-nccl-")
    planned = s.plan(["python", "t.py"], nodes=8, debug_nodes=["gpu001", "gpu002"])
    run = planned.render(write=False)
    assert {v.name: v.value for v in run.plan.env}["NCCL_DEBUG"] == "INFO"
    assert 'in gpu001|gpu002) ;; *) export NCCL_DEBUG=WARN;' in run.sbatch


def test_flight_recorder_dumps_go_node_local_above_the_limit(ck: Any, tmp_path: Path) -> None:
    path = site(tmp_path)
    small = render(ck, path, tmp_path, "--nodes", "4", "--launcher", "torchrun", "--set", "container=false")
    big = render(ck, path, tmp_path, "--nodes", "8", "--launcher", "torchrun", "--set", "container=false")
    assert small.code == big.code == 0, small.err + big.err
    for out, want in ((small.run_dir, f"{small.run_dir}/logs/fr-55.r1.rank"),
                      (big.run_dir, "/local/scratch/clusterkit-fr-55.r1.rank")):
        job = (out / "job.sbatch").read_text()
        for name in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
            m = re.search(rf"^export {name}=(.+)$", job, re.M)
            assert m, name
            assert _expand(m.group(1), "gpu003", "1") == want, (name, m.group(1))
    env = {e["name"]: e for e in json.loads((big.run_dir / "plan.json").read_text())["env"]}
    assert "copies the dump of the rank its verdict names" in env["TORCH_FR_DUMP_TEMP_FILE"]["reason"]
