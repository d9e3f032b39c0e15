"""The command line as a user meets it: help, exit codes, one-line errors, site configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterkit.cli import COMMANDS
from tests.conftest import REPO, assert_one_line_error, shared_site

EXAMPLES = sorted(p for p in (REPO / "site_configs").glob("*.yaml") if not p.name.startswith("_"))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help(ck, command: str) -> None:
    result = ck(command, "--help")
    assert result.code == 0, result.err
    assert "Usage: clusterkit " + command in result.out


@pytest.mark.parametrize("sub", ["list", "show", "validate", "schema"])
def test_sites_subcommands_have_help(ck, sub: str) -> None:
    result = ck("sites", sub, "--help")
    assert result.code == 0 and "Usage:" in result.out


def test_top_level_help_lists_exit_codes(ck) -> None:
    result = ck("--help")
    assert result.code == 0
    for code in ("0  ok", "1  runtime failure", "2  usage or config error", "3  preflight could not reach"):
        assert code in result.out


def test_help_imports_neither_paramiko_nor_submitit(ck) -> None:
    # -X importtime: a fresh interpreter writes one "import time:" line to stderr per module it imports
    result = ck.proc("--help", env={"PYTHONPROFILEIMPORTTIME": "1"})
    lines = result.err.splitlines()
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in lines if line.startswith("import time:")}
    heavy = sorted(m for m in ("paramiko", "submitit", "torch") if m in imported)
    other = [line for line in lines if not line.startswith("import time:")]
    assert result.code == 0 and heavy == [] and other == [], (heavy, other)


def test_python_dash_m_and_version(ck) -> None:
    result = ck.proc("--version")
    assert result.code == 0 and "clusterkit" in result.out


def test_every_example_site_validates(ck) -> None:
    assert len(EXAMPLES) >= 5
    result = ck("sites", "validate", *map(str, EXAMPLES))
    assert result.code == 0, result.err
    assert result.out.count(": ok (") == len(EXAMPLES)


def test_sites_list_shows_origin_and_shadowing(ck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = tmp_path / "sites"
    extra.mkdir()
    (extra / "testbed.yaml").write_text((REPO / "site_configs" / "testbed.yaml").read_text())
    (extra / "mine.yaml").write_text("name: mine\nnodes: {nodelist: 'n[1-2]', gpus_per_node: 4}\n")
    monkeypatch.setenv("CLUSTERKIT_SITES", str(extra))
    result = ck("sites", "list", "--json")
    rows = {(r["name"], r["from"]): r for r in json.loads(result.out)}
    assert rows[("testbed", "./site_configs")]["shadowed"] is False
    assert rows[("testbed", "$CLUSTERKIT_SITES")]["shadowed"] is True
    assert rows[("mine", "$CLUSTERKIT_SITES")]["valid"] is True
    shown = ck("sites", "show", "mine", "--json")
    assert json.loads(shown.out)["source"] == str(extra / "mine.yaml")


def test_sites_show_merges_extends(ck) -> None:
    result = ck("sites", "show", "ib-h100", "--json")
    site = json.loads(result.out)["site"]
    assert site["scheduler"]["partition"] == "gpu"            # from the child
    assert site["ssh"]["fanout"] == 64                         # from _slurm-defaults.yaml
    assert site["preflight"]["policy"] == "exclude"


def test_schema_is_json_schema(ck) -> None:
    schema = json.loads(ck("sites", "schema").out)
    assert schema["additionalProperties"] is False
    assert {"name", "nodes", "network", "storage", "extends"} <= set(schema["properties"])


BAD_CONFIGS = {
    "bad_yaml": ("name: x\nnodes: [a\n", ["bad_yaml.yaml:3: invalid YAML"]),
    "wrong_type": ("name: x\nnodes:\n  nodelist: n1\n  gpus_per_node: eight\n",
                   ["wrong_type.yaml:4: nodes.gpus_per_node: Input should be a valid integer"]),
    "unknown_key": ("name: x\nnodes: {nodelist: n1, gpus_per_node: 1}\nnetwrok: {}\n",
                    ["unknown_key.yaml:3: netwrok: unknown key 'netwrok'; valid keys:"]),
    "bad_hostlist": ("name: x\nnodes:\n  nodelist: 'gpu[1-'\n  gpus_per_node: 1\n",
                     ["bad_hostlist.yaml:3: nodes.nodelist: bad hostlist"]),
    "zero_gpus": ("name: x\nnodes:\n  nodelist: n1\n  gpus_per_node: 0\n",
                  ["zero_gpus.yaml:4: nodes.gpus_per_node: Input should be greater than or equal to 1"]),
    "hca_on_ethernet": ("name: x\nnodes: {nodelist: n1, gpus_per_node: 1}\n"
                        "network:\n  fabric: ethernet\n  hcas: [mlx5_0]\n",
                        ["hca_on_ethernet.yaml:5: network.hcas: HCAs listed but fabric is ethernet"]),
    "missing_parent": ("extends: nowhere.yaml\nname: x\n",
                       ["missing_parent.yaml:1: extends: parent config 'nowhere.yaml' not found"]),
    "several": ("name: 'a b'\nnodes:\n  nodelist: n1\n  gpus_per_node: -1\nscheduler: {kind: pbs}\n",
                ["several.yaml:1: name:", "several.yaml:4: nodes.gpus_per_node:", "several.yaml:5: scheduler.kind:"]),
    "duplicate": ("name: x\nname: y\n", ["duplicate.yaml:2: name: duplicate key"]),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_site_configs_point_at_file_line_key(ck, tmp_path: Path, case: str) -> None:
    text, expected = BAD_CONFIGS[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    result = ck("sites", "validate", str(path), cwd=tmp_path)
    assert_one_line_error(result, 2)
    errors = [line.removeprefix("clusterkit: error: ") for line in result.lines]
    for needle in expected:
        assert any(e.startswith(needle) for e in errors), (needle, errors)
    assert len(errors) == len(expected), errors   # all at once, one line each


def test_extends_cycle_and_parent_line(ck, tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("extends: b.yaml\nname: a\nnodes: {nodelist: n1, gpus_per_node: 1}\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    assert_one_line_error(ck("sites", "validate", "a.yaml", cwd=tmp_path), 2,
                          "extends cycle: a.yaml -> b.yaml -> a.yaml")
    (tmp_path / "p.yaml").write_text("ssh:\n  port: 70000\n")
    (tmp_path / "c.yaml").write_text("extends: p.yaml\nname: c\nnodes: {nodelist: n1, gpus_per_node: 1}\n")
    assert_one_line_error(ck("sites", "validate", "c.yaml", cwd=tmp_path), 2, "p.yaml:2: ssh.port:")


def test_unknown_site_lists_known(ck) -> None:
    assert_one_line_error(ck("render", "--site", "nosuch", "--", "python", "x.py"), 2,
                          "no site named 'nosuch'", "testbed")


@pytest.mark.parametrize("args,needles", [
    (["--stage", "huge"], ["Invalid value for '--stage'"]),
    (["--launcher", "slurmrun"], ["unknown launcher 'slurmrun'", "mpirun"]),
    (["--stage", "multi-node", "--nodes", "12"], ["outside stage multi-node (2-8 nodes)"]),
    (["--stage", "multi-node", "--nodes", "5"], ["site testbed has only 4 nodes"]),
    (["--stage", "large-cluster", "--nodes", "3"], ["outside stage large-cluster (9 or more nodes)"]),
    (["--gpus-per-node", "9"], ["--gpus-per-node 9: site testbed nodes have 8 GPUs"]),
    (["--launcher", "deepspeed", "--set", "global_batch=100", "--set", "micro_batch=4"],
     ["global_batch 100 != micro_batch 4 x grad_accum 1 x data parallel 8 = 32"]),
    (["--launcher", "deepspeed", "--set", "offload=optimizer+params"], ["needs zero_stage=3"]),
    (["--launcher", "megatron", "--set", "tp=3"], ["does not divide the world size 8"]),
    (["--launcher", "megatron", "--stage", "multi-node", "--nodes", "2", "--set", "tp=16"], ["spans nodes"]),
    (["--set", "zero_stage"], ["expected key=value"]),
    (["--set", "time=forever"], ["not a Slurm time"]),
    (["--exclude", "node[9"], ["--exclude"]),
    (["--exclude", "node7"], ["cannot exclude node7"]),
])
def test_impossible_requests_are_one_line_errors(ck, tmp_path: Path, args: list[str], needles: list[str]) -> None:
    out = tmp_path / "run"
    result = ck("render", "--site", "testbed", *args, "--out", str(out), "--", "python", "train.py")
    assert_one_line_error(result, 2, *needles)
    assert not out.exists(), "nothing may be written for a bad request"


def test_missing_command(ck) -> None:
    result = ck("render", "--site", "testbed")
    assert result.code == 2 and "Missing argument 'COMMAND...'" in result.err


def test_output_directory_problems(ck, tmp_path: Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("x")
    assert_one_line_error(ck("render", "--site", "local", "--out", str(afile / "run"), "--", "python", "x.py"), 2,
                          "is not a writable directory")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("precious")
    assert_one_line_error(ck("render", "--site", "local", "--out", str(busy), "--", "python", "x.py"), 2,
                          "already exists and is not empty")
    assert (busy / "keep.txt").read_text() == "precious" and len(list(busy.iterdir())) == 1
    assert_one_line_error(ck("render", "--site", "local", "--out", str(tmp_path / "a\nb"), "--", "python", "x.py"), 2,
                          "control characters")


def test_no_half_written_run_dir_when_writing_fails(ck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterkit import rundir as workspace

    real_write = Path.write_text
    calls = {"n": 0}

    def failing_write(self: Path, *args, **kwargs):  # the second artifact hits a full disk
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(workspace.Path, "write_text", failing_write)
    result = ck("render", "--site", "local", "--out", str(tmp_path / "run"), "--", "python", "x.py")
    assert_one_line_error(result, 2, "No space left on device")
    assert list(tmp_path.iterdir()) == [], "no run directory and no temporary left behind"


def test_render_json_and_warning(ck, tmp_path: Path) -> None:
    site = shared_site(tmp_path / "sites", "eth-nfs", tmp_path)
    result = ck("render", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--out", str(tmp_path / "r"),
                "--json", "--", "python", "train.py")
    data = json.loads(result.out)
    assert data["world_size"] == 8 and data["launcher"] == "torchrun"
    assert any("Ethernet fabric" in w for w in data["warnings"])


def test_weak_setups_warn_but_render(ck, tmp_path: Path) -> None:
    site = tmp_path / "nfs-big.yaml"
    site.write_text("name: nfs-big\nnodes: {nodelist: 'n[01-32]', gpus_per_node: 8}\n"
                    "network: {fabric: infiniband, hcas: [mlx5_0]}\nstorage:\n  - {path: /shared, type: nfs}\n"
                    f"  - {{path: {tmp_path}, type: local, shared: true}}\n")
    result = ck("render", "--site", str(site), "--stage", "large-cluster", "--out", str(tmp_path / "r"),
                "--", "python", "t.py")
    assert result.code == 0, result.err
    assert "only NFS shared storage" in result.err


def test_multi_node_needs_shared_storage(ck, tmp_path: Path) -> None:
    site = tmp_path / "nostore.yaml"
    site.write_text("name: nostore\nnodes: {nodelist: 'n[01-04]', gpus_per_node: 8}\n")
    assert_one_line_error(ck("render", "--site", str(site), "--stage", "multi-node", "--", "python", "t.py"), 2,
                          "needs shared storage")


def test_site_template_override(ck, tmp_path: Path) -> None:
    tdir = tmp_path / "tpl"
    tdir.mkdir()
    (tdir / "nccl.env.j2").write_text("# site's own nccl.env\n"
                                      "{% for v in env %}{{ v.name }}={{ v.value | shell_quote }}\n{% endfor %}")
    site = tmp_path / "mysite.yaml"
    site.write_text((REPO / "site_configs" / "testbed.yaml").read_text().replace("name: testbed", "name: mysite")
                    + "templates: ./tpl\n")
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "r"), "--", "python", "t.py")
    assert result.code == 0, result.err
    text = (tmp_path / "r" / "nccl.env").read_text()
    assert text.startswith("# site's own nccl.env\nNCCL_DEBUG=WARN\n")
    assert (tmp_path / "r" / "job.sbatch").read_text().startswith("#!/bin/bash")   # built-in kept


def test_debug_adds_nccl_debug_knobs(ck, tmp_path: Path) -> None:
    site = shared_site(tmp_path / "sites", "ib-h100", tmp_path)
    result = ck("render", "--site", str(site), "--stage", "multi-node", "--debug", "--out", str(tmp_path / "r"),
                "--", "python", "t.py")
    assert result.code == 0, result.err
    env = (tmp_path / "r" / "nccl.env").read_text()
    assert "NCCL_DEBUG=INFO  # debug:" in env and "NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,ENV,NET,GRAPH" in env
    assert f'NCCL_DEBUG_FILE={tmp_path}/r/logs/nccl-"${{CK_JOB_ID}}.r${{SLURM_RESTART_COUNT:-0}}".%h.%p.log' in env
    assert "NCCL_IB_TIMEOUT=22  # site: site override in ib-h100" in env


def test_nccl_policy_per_fabric_and_stage(ck, tmp_path: Path) -> None:
    sites = {name: str(shared_site(tmp_path / "sites", name, tmp_path)) for name in ("ib-h100", "roce-a100", "eth-nfs")}

    def env_of(site: str, *args: str) -> dict[str, str]:
        out = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
        r = ck("render", "--site", sites[site], *args, "--out", str(out), "--json", "--", "python", "t.py")
        assert r.code == 0, r.err
        return {e["name"]: e["value"] for e in json.loads((out / "plan.json").read_text())["env"]}

    ib_large = env_of("ib-h100", "--stage", "large-cluster")
    assert ib_large["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}" for i in range(8))
    assert ib_large["NCCL_IB_QPS_PER_CONNECTION"] == "4" and "NCCL_CROSS_NIC" not in ib_large
    ib_multi = env_of("ib-h100", "--stage", "multi-node")
    assert "NCCL_IB_QPS_PER_CONNECTION" not in ib_multi and ib_multi["NCCL_IB_DISABLE"] == "0"
    roce = env_of("roce-a100", "--stage", "multi-node")
    assert (roce["NCCL_IB_GID_INDEX"], roce["NCCL_IB_TC"]) == ("3", "106") and "NCCL_IB_SL" not in roce
    eth = env_of("eth-nfs", "--stage", "multi-node")
    assert eth["NCCL_IB_DISABLE"] == "1" and eth["NCCL_SOCKET_IFNAME"] == "=eth0" and "NCCL_IB_HCA" not in eth
    single = env_of("ib-h100", "--stage", "single-node")
    nccl_side = {n for n in single if not n.startswith(("TORCH_", "TORCHELASTIC_"))}   # torch's own: not NCCL's
    assert nccl_side == {"NCCL_DEBUG", "OMP_NUM_THREADS", "NCCL_IB_TIMEOUT"}
    for e in (ib_large, roce, eth, single):
        assert "NCCL_P2P_DISABLE" not in e and "NCCL_SHM_DISABLE" not in e


@pytest.mark.parametrize("runtime,flag", [("pyxis", "--container-mounts="), ("apptainer", "--bind ")])
def test_container_mounts_the_run_directory_unless_covered(ck, tmp_path: Path, runtime: str, flag: str) -> None:
    site = tmp_path / "ctr.yaml"
    site.write_text(
        "name: ctr\nscheduler: {kind: slurm, partition: gpu}\nnodes: {nodelist: 'n[1-4]', gpus_per_node: 8}\n"
        f"software: {{container: {{runtime: {runtime}, image: img.sif, mounts: ['{tmp_path}/shared:/shared']}}}}\n"
        f"storage:\n  - {{path: /shared, type: nfs}}\n  - {{path: {tmp_path}/runs, type: nfs}}\n")
    outside = tmp_path / "runs" / "a"
    result = ck("render", "--site", str(site), "--stage", "multi-node", "--out", str(outside), "--", "python", "t.py")
    assert result.code == 0
    line = next(ln for ln in (outside / "job.sbatch").read_text().splitlines() if flag in ln)
    assert f"{tmp_path}/shared:/shared,{outside}" in line       # the launcher must see hostfile and configs
    # a run directory under a mount's target is already visible inside the container
    covered = Path("/shared/runs/b")
    from clusterkit.config.load import load_file
    from clusterkit.job.render import container_mounts
    from clusterkit.job.request import JobRequest
    from tests.conftest import make_plan

    plan = make_plan(load_file(site), JobRequest(stage="multi-node", command=("python", "t.py"), run_dir=str(covered)))
    assert container_mounts(plan) == [f"{tmp_path}/shared:/shared"]
