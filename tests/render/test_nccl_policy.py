"""The NCCL/torch environment per fabric x stage, read back from rendered files: every policy
variable carries a reason and a source, the job exports what nccl.env says, pyxis is told to
take those names from the job, and the per-job file names expand in a real bash."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, shared_site


def render(ck: Any, tmp_path: Path, site: str | Path, *args: str, extra: str = "") -> Path:
    """Render ``site`` (an example name, optionally extended by ``extra`` YAML) into a new run directory."""
    sites = tmp_path / "sites"
    path = shared_site(sites, site, tmp_path) if isinstance(site, str) else site
    if extra:
        child = sites / f"x{len(list(sites.iterdir()))}.yaml"
        child.write_text(f"extends: {path}\n{extra}")
        path = child
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
    result = ck("render", "--site", str(path), *args, "--out", str(out), "--", "python", "t.py")
    assert result.code == 0, result.err
    return out


def env_of(out: Path) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in json.loads((out / "plan.json").read_text())["env"]}


def values(out: Path) -> dict[str, str]:
    return {name: e["value"] for name, e in env_of(out).items()}


def test_every_policy_value_has_a_reason_and_a_source(ck: Any, tmp_path: Path) -> None:
    for site in ("ib-h100", "roce-a100", "eth-nfs", "efa-p5"):
        for stage in ("single-node", "multi-node", "large-cluster")[: 2 if site == "eth-nfs" else 3]:
            out = render(ck, tmp_path, site, "--stage", stage, "--debug")
            lines = [ln for ln in (out / "nccl.env").read_text().splitlines() if ln and not ln.startswith("#")]
            policy = [ln for ln in lines if "  # policy: " in ln or "  # debug: " in ln]
            assert policy, (site, stage)
            for line in policy:
                assert line.endswith("]") and " [" in line, line        # [source]
            for name, e in env_of(out).items():
                assert e["reason"] and (e["ref"] or e["source"] == "launcher"), name


def test_rdma_fabrics_agree_across_stages(ck: Any, tmp_path: Path) -> None:
    ib_multi = values(render(ck, tmp_path, "ib-h100", "--stage", "multi-node"))
    ib_large = values(render(ck, tmp_path, "ib-h100", "--stage", "large-cluster"))
    # IB: more QPs only past one switch, always with the split pinned off (2.18/2.19 default on)
    assert "NCCL_IB_QPS_PER_CONNECTION" not in ib_multi
    assert (ib_large["NCCL_IB_QPS_PER_CONNECTION"], ib_large["NCCL_IB_SPLIT_DATA_ON_QPS"]) == ("4", "0")
    # NCCL_CROSS_NIC only where the site says its spine is oversubscribed, at every multi-node stage
    assert "NCCL_CROSS_NIC" not in ib_multi and "NCCL_CROSS_NIC" not in ib_large
    spine = "network: {spine_oversubscribed: true}\n"
    for stage in ("multi-node", "large-cluster"):
        assert values(render(ck, tmp_path, "ib-h100", "--stage", stage, extra=spine))["NCCL_CROSS_NIC"] == "0"
    assert "NCCL_CROSS_NIC" not in values(render(ck, tmp_path, "ib-h100", "--stage", "single-node", extra=spine))
    # RoCE: ECMP without adaptive routing: 4 QPs from two nodes on
    roce = env_of(render(ck, tmp_path, "roce-a100", "--stage", "multi-node"))
    assert roce["NCCL_IB_QPS_PER_CONNECTION"]["value"] == "4" and "ECMP" in roce["NCCL_IB_QPS_PER_CONNECTION"]["reason"]
    assert roce["NCCL_IB_SPLIT_DATA_ON_QPS"]["value"] == "0"


def test_roce_gid_pinned_or_left_to_nccl(ck: Any, tmp_path: Path) -> None:
    pinned = env_of(render(ck, tmp_path, "roce-a100", "--stage", "multi-node"))
    assert pinned["NCCL_IB_GID_INDEX"]["value"] == "3" and "NCCL_IB_ROCE_VERSION_NUM" not in pinned
    assert "preflight checks it is RoCE v2" in pinned["NCCL_IB_GID_INDEX"]["reason"]
    assert "torch loads" in pinned["NCCL_IB_GID_INDEX"]["reason"]          # which NCCL the job runs
    free = env_of(render(ck, tmp_path, "roce-a100", "--stage", "multi-node",
                         extra="network: {roce: {gid_index: null}}\n"))
    assert "NCCL_IB_GID_INDEX" not in free
    assert (free["NCCL_IB_ROCE_VERSION_NUM"]["value"], free["NCCL_IB_ADDR_FAMILY"]["value"]) == ("2", "AF_INET")
    assert "2.21" in free["NCCL_IB_ROCE_VERSION_NUM"]["reason"]
    assert free["NCCL_IB_TC"]["value"] == "106"
    ctr = ("software: {container: {runtime: pyxis, image: 'nvcr.io#nvidia/pytorch:24.05-py3'}}\n"
           "network: {roce: {gid_index: 3}}\n")
    in_image = env_of(render(ck, tmp_path, "roce-a100", "--stage", "multi-node", extra=ctr))
    assert "container image nvcr.io#nvidia/pytorch:24.05-py3" in in_image["NCCL_IB_GID_INDEX"]["reason"]


def test_ethernet_sockets_and_efa(ck: Any, tmp_path: Path) -> None:
    eth = env_of(render(ck, tmp_path, "eth-nfs", "--stage", "multi-node"))
    threads, socks = int(eth["NCCL_SOCKET_NTHREADS"]["value"]), int(eth["NCCL_NSOCKS_PERTHREAD"]["value"])
    assert threads * socks <= 64 and threads <= 16 and threads * socks > 1
    assert eth["NCCL_IB_DISABLE"]["value"] == "1" and "NCCL_IB_HCA" not in eth
    efa = values(render(ck, tmp_path, "efa-p5", "--stage", "large-cluster"))
    assert (efa["FI_PROVIDER"], efa["FI_EFA_USE_DEVICE_RDMA"], efa["NCCL_SOCKET_IFNAME"]) == ("efa", "1", "=ens32")
    assert not [n for n in efa if n.startswith("NCCL_IB_")], efa
    # the plugin's network only, by the name every aws-ofi-nccl release answers to; NCCL's default
    # plugin file name (libnccl-net.so) is one every release installs
    assert efa["NCCL_NET"] == "AWS Libfabric" and "NCCL_NET_PLUGIN" not in efa
    job = (render(ck, tmp_path, "efa-p5", "--stage", "multi-node") / "job.sbatch").read_text()
    line = next(ln for ln in job.splitlines() if ln.startswith("export NCCL_NET="))
    got = subprocess.run(["bash", "-c", line + '; printf "%s" "$NCCL_NET"'], capture_output=True, text=True,
                         check=True).stdout
    assert got == "AWS Libfabric"
    # the space cannot travel in DeepSpeed's pdsh env file: refused before the queue, with the way out
    site = shared_site(tmp_path / "sites", "efa-p5", tmp_path)
    refused = ck("render", "--site", str(site), "--stage", "multi-node", "--launcher", "deepspeed", "--set",
                 "ds_launcher=pdsh", "--set", "container=false", "--set", "max_restarts=0", "--out",
                 str(tmp_path / "pdsh"), "--", "python", "t.py")
    assert refused.code == 2 and "NCCL_NET= 'AWS Libfabric'" in refused.err and "ds_launcher=no_ssh" in refused.err
    job = (render(ck, tmp_path, "efa-p5", "--stage", "multi-node") / "job.sbatch").read_text()
    assert "ulimit -l unlimited" in job


def test_efa_takes_no_hcas(ck: Any, tmp_path: Path) -> None:
    site = tmp_path / "bad.yaml"
    site.write_text(f"extends: {REPO / 'site_configs' / 'efa-p5.yaml'}\nname: bad\nnetwork: {{hcas: [rdmap16s27]}}\n")
    result = ck("sites", "validate", str(site))
    assert result.code == 2 and "aws-ofi-nccl plugin finds the EFA devices itself" in result.err


def test_debug_names_files_per_job_and_restart(ck: Any, tmp_path: Path) -> None:
    out = render(ck, tmp_path, "ib-h100", "--stage", "multi-node", "--debug")
    env = values(out)
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,BOOTSTRAP,ENV,NET,GRAPH"
    job = (out / "job.sbatch").read_text()
    exports = {ln.split("=", 1)[0][len("export "):]: ln.split("=", 1)[1] for ln in job.splitlines()
               if ln.startswith(("export NCCL_DEBUG_FILE=", "export TORCH_FR_DUMP_TEMP_FILE=",
                                 "export TORCH_NCCL_DEBUG_INFO_TEMP_FILE="))}
    assert len(exports) == 3
    # what the job's bash makes of them, with Slurm's variables as a requeued job sees them
    script = "".join(f'printf "%s\\n" {word}\n' for word in exports.values())
    got = subprocess.run(["bash", "-uc", script], env={"CK_JOB_ID": "4242", "SLURM_RESTART_COUNT": "1"},
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert got[0] == f"{out}/logs/nccl-4242.r1.%h.%p.log"
    assert got[1] == got[2] == f"{out}/logs/fr-4242.r1.rank"
    # nccl.env, sourced by hand, says the same
    sourced = subprocess.run(["bash", "-c", f"set -a; . {out}/nccl.env >/dev/null 2>&1; echo \"$NCCL_DEBUG_FILE\""],
                             env={"CK_JOB_ID": "7", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True).stdout
    assert sourced.strip() == f"{out}/logs/nccl-7.r0.%h.%p.log"


def test_run_dir_in_a_file_name_stays_quoted(ck: Any, tmp_path: Path) -> None:
    odd = tmp_path / "a b$(touch pwned)"
    odd.mkdir()
    site = shared_site(tmp_path / "sites", "ib-h100", odd)
    out = odd / "run"
    result = ck("render", "--site", str(site), "--stage", "multi-node", "--debug", "--out", str(out),
                "--", "python", "t.py")
    assert result.code == 0, result.err
    line = next(ln for ln in (out / "job.sbatch").read_text().splitlines() if ln.startswith("export NCCL_DEBUG_FILE="))
    got = subprocess.run(["bash", "-c", line + '; printf "%s" "$NCCL_DEBUG_FILE"'], cwd=tmp_path,
                         env={"CK_JOB_ID": "9"}, capture_output=True, text=True, check=True).stdout
    assert got == f"{out}/logs/nccl-9.r0.%h.%p.log" and not (tmp_path / "pwned").exists()


def test_pyxis_takes_every_variable_from_the_job(ck: Any, tmp_path: Path) -> None:
    out = render(ck, tmp_path, "ib-h100", "--stage", "multi-node")
    job = (out / "job.sbatch").read_text()
    srun = next(ln for ln in job.splitlines() if "--container-image=" in ln)
    names = srun.split("--container-env=", 1)[1].split()[0].split(",")
    assert names == list(env_of(out)), names
    assert "NCCL_IB_TIMEOUT" in names           # the site's own overrides too
    # without a container nothing is passed
    bare = render(ck, tmp_path, "ib-h100", "--stage", "multi-node", "--set", "container=false")
    assert "--container-env" not in (bare / "job.sbatch").read_text()


@pytest.mark.parametrize("launcher", ["torchrun", "deepspeed"])
def test_pdsh_env_file_leaves_run_time_names_out(ck: Any, tmp_path: Path, launcher: str) -> None:
    args = ("--stage", "multi-node", "--launcher", launcher, "--debug", "--set", "container=false")
    if launcher == "deepspeed":
        args += ("--set", "ds_launcher=pdsh", "--set", "max_restarts=0")
    out = render(ck, tmp_path, "ib-h100", *args)
    ds_env = out / ".deepspeed_env"
    if launcher == "torchrun":
        assert not ds_env.exists()
        return
    text = ds_env.read_text()
    assert "NCCL_DEBUG=INFO" in text and "TORCH_FR_BUFFER_SIZE=2000" in text
    assert "NCCL_DEBUG_FILE" not in text and "$" not in text


def test_memlock_raised_only_where_rdma_runs(ck: Any, tmp_path: Path) -> None:
    ib = (render(ck, tmp_path, "ib-h100", "--stage", "multi-node") / "job.sbatch").read_text()
    assert ib.index("ulimit -l unlimited") < ib.index("ck_launch=(")
    for site, stage in (("eth-nfs", "multi-node"), ("ib-h100", "single-node")):
        assert "ulimit -l" not in (render(ck, tmp_path, site, "--stage", stage) / "job.sbatch").read_text()


def test_memlock_lines_run_in_bash(tmp_path: Path) -> None:
    """The locked-memory lines under a hard limit that cannot be raised, and one that can."""
    text = (REPO / "templates" / "job-limits.j2").read_text()
    body = text.split("{% if rdma %}", 1)[1].split("{% endif %}", 1)[0]
    lib = 'ck_log() { echo "clusterkit: $*" >&2; }\n'
    # soft 64 KiB as a login shell's default, hard 128 KiB: raised to the hard limit, and said
    low = subprocess.run(["bash", "-c", "ulimit -S -l 64; ulimit -H -l 128; " + lib + body + "ulimit -l"],
                         capture_output=True, text=True)
    assert low.stdout.strip() == "128", low.stderr
    assert low.stderr.count("\n") == 1 and "warning: locked memory is limited to 128 KiB (the hard limit)" in low.stderr
    # already unlimited: nothing to do, nothing said
    ok = subprocess.run(["bash", "-c", "ulimit -l unlimited 2>/dev/null || exit 0; " + lib + body + "ulimit -l"],
                        capture_output=True, text=True)
    assert ok.stdout.strip() in ("unlimited", "") and ok.stderr == ""
