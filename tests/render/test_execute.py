"""Run rendered job scripts end to end against stand-ins for srun/scontrol and the launchers.

tests/render/fakebin holds a fake ``srun`` (runs the step once per node/task with Slurm's
per-node variables), a fake ``scontrol show hostnames``, and a recorder that stands in for each
launcher and writes down the argv and environment it received on each node.  This checks what
golden files cannot: that per-node variables expand on each node, that the launcher arguments
are accepted by the launcher's own parser, and that hostile values arrive as plain data.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, assert_one_line_error, shared_site

FAKEBIN = Path(__file__).parent / "fakebin"
HOSTILE = ["a'; echo x", "$(touch pwned)", "sp ace", "`touch pwned2`", "new\nline", "*"]


def render(ck, tmp_path: Path, *args: str, command: list[str] | None = None, out: str = "run") -> Path:
    run_dir = tmp_path / out
    cmd = command or ["python", "train.py", *HOSTILE]
    result = ck("render", *args, "--out", str(run_dir), "--", *cmd)
    assert result.code == 0, result.err
    return run_dir


def execute(run_dir: Path, tmp_path: Path, nodelist: str = "node[1-4]", nnodes: int = 4, job_id: int = 1234) -> Path:
    logs = tmp_path / "fakelogs"
    logs.mkdir(exist_ok=True)
    env = dict(os.environ, PATH=f"{FAKEBIN}:{os.environ['PATH']}", FAKE_LOG_DIR=str(logs),
               SLURM_JOB_ID=str(job_id), SLURM_JOB_NODELIST=nodelist, SLURM_NNODES=str(nnodes))
    p = subprocess.run(["bash", str(run_dir / "job.sbatch")], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert not list(tmp_path.rglob("pwned*")), "a hostile value was executed"
    return logs


def recorded(logs: Path, launcher: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    out = {}
    for f in sorted(logs.glob(f"{launcher}.*")):
        args, env = [], {}
        text = f.read_text()
        for block in re.split(r"\n(?=ARG |ENV )", text.rstrip("\n")):
            kind, _, rest = block.partition(" ")
            if kind == "ARG":
                args.append(rest)
            else:
                k, _, v = rest.partition("=")
                env[k] = v
        out[f.name.split(".", 1)[1]] = (args, env)
    return out


def test_torchrun_multi_node_expands_per_node_and_parses(ck, tmp_path: Path) -> None:
    import torch.distributed.run as torchrun

    run_dir = render(ck, tmp_path, "--site", "testbed", "--stage", "multi-node", "--nodes", "4")
    logs = execute(run_dir, tmp_path)
    calls = recorded(logs, "torchrun")
    assert sorted(calls) == ["0.0", "1.0", "2.0", "3.0"]            # once per node
    for node, (args, env) in calls.items():
        assert env["SLURM_NODEID"] == node.split(".")[0]
        assert env["CK_HEAD"] == "node1" and env["CK_PORT"] == str(20000 + 1234 % 20000)
        ns = torchrun.get_args_parser().parse_args(args)            # torch's own parser accepts it
        assert (ns.nnodes, ns.nproc_per_node, ns.rdzv_backend) == ("4", "8", "c10d")
        assert ns.rdzv_endpoint == f"node1:{20000 + 1234}"
        assert ns.rdzv_endpoint.split(":")[0] != "localhost"
        assert ns.training_script == "train.py" and ns.training_script_args == HOSTILE


def test_torchrun_single_node_uses_the_job_port(ck, tmp_path: Path) -> None:
    import torch.distributed.run as torchrun

    run_dir = render(ck, tmp_path, "--site", "local")
    logs = execute(run_dir, tmp_path)
    (args, env), = recorded(logs, "torchrun").values()
    ns = torchrun.get_args_parser().parse_args(args)
    assert not ns.standalone and ns.nproc_per_node == "2" and ns.training_script_args == HOSTILE
    assert env["CK_HEAD"] == "127.0.0.1"
    # the job's own port, below Linux's ephemeral range (32768-60999), not one the OS picks there
    assert ns.master_addr == "127.0.0.1" and ns.master_port == int(env["CK_PORT"]) and 20000 <= ns.master_port < 32000


def test_deepspeed_hostfile_from_allocation_and_no_ssh(ck, tmp_path: Path) -> None:
    run_dir = render(ck, tmp_path, "--site", str(shared_site(tmp_path / "sites", "roce-a100", tmp_path)),
                     "--stage", "large-cluster", "--nodes", "9",
                     "--launcher", "deepspeed", "--set", "zero_stage=3", "--set", "grad_accum=4")
    logs = execute(run_dir, tmp_path, nodelist="a100-[03-11]", nnodes=9)
    calls = recorded(logs, "deepspeed")
    assert len(calls) == 9
    hostfile = (run_dir / "hostfile").read_text().splitlines()
    # deepspeed's own hostfile grammar (launcher/runner.py _parse_hostfile): '^(\S+)\s+slots=(\d+)', no duplicates
    assert hostfile == [f"a100-{i:02d} slots=8" for i in range(3, 12)]
    for node, (args, env) in calls.items():
        assert args[args.index("--hostfile") + 1] == str(run_dir / "hostfile")
        assert args[args.index("--node_rank") + 1] == node.split(".")[0]
        assert args[args.index("--master_addr") + 1] == "a100-03"
        assert "--no_ssh" in args
        script = args.index("train.py")
        assert args[script + 1:script + 1 + len(HOSTILE)] == HOSTILE
        assert args[-2:] == ["--deepspeed_config", str(run_dir / "ds_config.json")]
    cfg = json.loads((run_dir / "ds_config.json").read_text())
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * 72
    assert cfg["zero_optimization"]["stage"] == 3
    assert (logs / "module.log").read_text() == "module load cuda/12.1\n"


def test_horovod_runs_once_with_total_slots(ck, tmp_path: Path) -> None:
    run_dir = render(ck, tmp_path, "--site", str(shared_site(tmp_path / "sites", "eth-nfs", tmp_path)),
                     "--stage", "multi-node", "--nodes", "3", "--launcher", "horovod",
                     "--set", "max_restarts=0")
    logs = execute(run_dir, tmp_path, nodelist="node[02-04]", nnodes=3)
    calls = recorded(logs, "horovodrun")
    assert len(calls) == 1
    (args, _env), = calls.values()
    assert args[:4] == ["-np", "12", "-H", "node02:4,node03:4,node04:4"]
    assert args[4:] == ["python", "train.py", *HOSTILE]


def test_colossalai_bare_hostfile(ck, tmp_path: Path) -> None:
    run_dir = render(ck, tmp_path, "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--launcher", "colossalai",
                     "--set", "max_restarts=0")
    logs = execute(run_dir, tmp_path, nodelist="node[3-4]", nnodes=2)
    (args, _env), = recorded(logs, "colossalai").values()
    assert (run_dir / "hostfile").read_text() == "node3\nnode4\n"
    assert args[:3] == ["run", "--nproc_per_node", "8"]
    assert args[args.index("--master_addr") + 1] == "node3"


def test_accelerate_machine_rank_per_node(ck, tmp_path: Path) -> None:
    run_dir = render(ck, tmp_path, "--site", "testbed", "--stage", "multi-node", "--nodes", "3", "--launcher",
                     "accelerate", "--set", "strategy=fsdp")
    logs = execute(run_dir, tmp_path, nodelist="node[1-3]", nnodes=3)
    calls = recorded(logs, "accelerate")
    assert sorted(a[a.index("--machine_rank") + 1] for a, _ in calls.values()) == ["0", "1", "2"]
    cfg = yaml.safe_load((run_dir / "accelerate.yaml").read_text())
    # keys of accelerate's ClusterConfig (accelerate/commands/config/config_args.py)
    known = {"compute_environment", "distributed_type", "mixed_precision", "num_machines", "num_processes",
             "machine_rank", "rdzv_backend", "same_network", "main_training_function", "gpu_ids", "use_cpu",
             "fsdp_config", "deepspeed_config", "main_process_ip", "main_process_port", "downcast_bf16"}
    assert set(cfg) <= known
    assert (cfg["num_machines"], cfg["num_processes"], cfg["distributed_type"]) == (3, 24, "FSDP")


def test_srun_one_task_per_gpu_with_ranks(ck, tmp_path: Path) -> None:
    run_dir = render(ck, tmp_path, "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "2",
                     "--launcher", "srun", command=["recorder", *HOSTILE])
    logs = execute(run_dir, tmp_path, nodelist="node[1-2]", nnodes=2)
    calls = recorded(logs, "recorder")
    assert sorted(calls) == ["0.0", "0.1", "1.0", "1.1"]
    ranks = sorted(int(env["RANK"]) for _, env in calls.values())
    assert ranks == [0, 1, 2, 3]
    for args, env in calls.values():
        assert args == HOSTILE and env["WORLD_SIZE"] == "4" and env["MASTER_ADDR"] == "node1"


def test_megatron_sizes_and_env(ck, tmp_path: Path) -> None:
    import torch.distributed.run as torchrun

    run_dir = render(ck, tmp_path, "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--launcher",
                     "megatron", "--set", "tp=4", "--set", "pp=2", command=["python", "pretrain_gpt.py", "--seq-length", "4096"])
    logs = execute(run_dir, tmp_path, nodelist="node[1-2]", nnodes=2)
    args, _ = recorded(logs, "torchrun")["0.0"]
    ns = torchrun.get_args_parser().parse_args(args)
    # world 16 / (tp 4 x pp 2) = data parallel 2: global batch 1 x 2 (Megatron's own default, made explicit)
    assert ns.training_script_args == ["--seq-length", "4096", "--tensor-model-parallel-size", "4",
                                       "--pipeline-model-parallel-size", "2", "--micro-batch-size", "1",
                                       "--global-batch-size", "2"]
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in (run_dir / "job.sbatch").read_text()


def test_hostile_run_dir_and_site_env_are_data(ck, tmp_path: Path) -> None:
    site = tmp_path / "evil.yaml"
    site.write_text((REPO / "site_configs" / "testbed.yaml").read_text().replace("name: testbed", "name: evil")
                    + "nccl:\n  env:\n    NCCL_SOCKET_IFNAME: \"$(touch pwned3)\"\n")
    run_dir = render(ck, tmp_path, "--site", str(site), "--stage", "multi-node", "--nodes", "2",
                     out="dir with space $(touch pwned4) 'q'")
    logs = execute(run_dir, tmp_path, nodelist="node[1-2]", nnodes=2)
    _, env = recorded(logs, "torchrun")["0.0"]
    assert env["NCCL_SOCKET_IFNAME"] == "$(touch pwned3)"


@pytest.mark.parametrize("args,needle", [
    (["--job-name", "x'; rm -rf /"], "--job-name"),
    (["--job-name", "a\nb"], "--job-name"),
    (["--set", "partition=gpu\n#SBATCH --wrap=x"], "partition"),
])
def test_hostile_values_that_reach_sbatch_lines_are_refused(ck, tmp_path: Path, args: list[str], needle: str) -> None:
    result = ck("render", "--site", "testbed", *args, "--out", str(tmp_path / "r"), "--", "python", "t.py")
    assert_one_line_error(result, 2, needle)
    assert not (tmp_path / "r").exists()
