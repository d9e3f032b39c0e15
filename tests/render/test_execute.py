"""Run rendered job scripts end to end against stand-ins for srun/scontrol, with the real
deepspeed and accelerate launchers.

tests/render/fakebin holds a fake ``srun`` (runs the step once per node/task with Slurm's
per-node variables), a fake ``scontrol show hostnames``, and a recorder that stands in for the
launchers that cannot run here: horovodrun and colossalai (not installable: horovod needs a
compiled Gloo/MPI build, colossalai pins an older torch; their own parsers and host handling run
on every golden case in test_launcher_parsers.py, from the side directory tests/run.sh unpacks)
and torchrun (its multi-node rendezvous needs the fake host names to resolve; the real torchrun
runs on the Slurm testbed in tests/slurm).  deepspeed and accelerate are the real ones: they start a recording training
script (``train.py`` below) per rank.  This checks what golden files cannot: that per-node
variables expand on each node, that the launcher arguments are accepted by the launcher's own
parser, and that hostile values arrive as plain data.
"""

from __future__ import annotations

import importlib.metadata
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
    # these jobs run on fakebin's srun stand-in, which runs launch steps, not the in-job preflight
    # (tests/slurm runs that on real Slurm)
    slurm_site = "local" not in args
    result = ck("render", *args, *(["--set", "preflight_in_job=false"] if slurm_site else []), "--out", str(run_dir),
                "--", *cmd)
    assert result.code == 0, result.err
    return run_dir


def execute(run_dir: Path, tmp_path: Path, nodelist: str = "node[1-4]", nnodes: int = 4, job_id: int = 1234,
            timeout: float = 60) -> Path:
    logs = tmp_path / "fakelogs"
    logs.mkdir(exist_ok=True)
    env = dict(os.environ, PATH=f"{FAKEBIN}:{os.environ['PATH']}", FAKE_LOG_DIR=str(logs),
               SLURM_JOB_ID=str(job_id), SLURM_JOB_NODELIST=nodelist, SLURM_NNODES=str(nnodes))
    p = subprocess.run(["bash", str(run_dir / "job.sbatch")], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    assert not list(tmp_path.rglob("pwned*")), "a hostile value was executed"
    return logs


# The training script the real launchers start: writes down, per rank, the argv and env it got.
TRAIN_RECORDER = """import json, os, sys
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CK_DS_CONFIG", "SLURM_NODEID")
with open(os.path.join(os.environ["FAKE_LOG_DIR"], "train." + os.environ["RANK"] + ".json"), "w") as fh:
    json.dump({"argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in keys}}, fh)
"""


def trained(logs: Path) -> dict[int, dict]:
    return {int(f.name.split(".")[1]): json.loads(f.read_text()) for f in logs.glob("train.*.json")}


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


@pytest.mark.e2e  # the real launcher starts its ranks
def test_deepspeed_hostfile_from_allocation_and_no_ssh(ck, tmp_path: Path) -> None:
    """The real deepspeed runner on each (fake) node, --no_ssh, with exclude_slots: 3 ranks."""
    (tmp_path / "train.py").write_text(TRAIN_RECORDER)
    site = shared_site(tmp_path / "sites", "roce-a100", tmp_path)
    run_dir = render(ck, tmp_path, "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "2",
                     "--launcher", "deepspeed", "--set", "zero_stage=3", "--set", "grad_accum=4",
                     "--set", "exclude_slots=a100-04:0")
    # generous: two deepspeed runners and their per-node launchers each import deepspeed and torch
    logs = execute(run_dir, tmp_path, nodelist="a100-[03-04]", nnodes=2, timeout=600)
    # deepspeed's own hostfile grammar (launcher/runner.py _parse_hostfile): '^(\S+)\s+slots=(\d+)', no duplicates
    assert (run_dir / "hostfile").read_text().splitlines() == ["a100-03 slots=2", "a100-04 slots=2"]
    ranks = trained(logs)
    assert sorted(ranks) == [0, 1, 2]
    config = str(run_dir / "ds_config.json")
    for rank, got in ranks.items():
        env = got["env"]
        node = "0" if rank < 2 else "1"
        assert env["SLURM_NODEID"] == node and env["WORLD_SIZE"] == "3" and env["MASTER_ADDR"] == "a100-03"
        assert env["MASTER_PORT"] == str(20000 + 1234 % 20000) and env["CK_DS_CONFIG"] == config
        # deepspeed puts --local_rank=N before the script's own arguments
        assert got["argv"] == [f"--local_rank={env['LOCAL_RANK']}", *HOSTILE, "--deepspeed_config", config]
    assert sorted(r["env"]["LOCAL_RANK"] for r in ranks.values()) == ["0", "0", "1"]
    cfg = json.loads((run_dir / "ds_config.json").read_text())
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * 3
    assert cfg["zero_optimization"]["stage"] == 3
    assert (logs / "module.log").read_text() == "module load cuda/12.1\n"   # once, in the batch shell


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
    run_dir = render(ck, tmp_path, "--site", "testbed", "--stage", "multi-node", "--nodes", "2",
                     "--launcher", "colossalai", "--set", "max_restarts=0")
    logs = execute(run_dir, tmp_path, nodelist="node[3-4]", nnodes=2)
    (args, _env), = recorded(logs, "colossalai").values()
    assert (run_dir / "hostfile").read_text() == "node3\nnode4\n"
    assert args[:3] == ["run", "--nproc_per_node", "8"]
    assert args[args.index("--master_addr") + 1] == "node3"


@pytest.mark.e2e  # the real launcher starts its ranks
def test_accelerate_starts_every_process(ck, tmp_path: Path) -> None:
    """The real ``accelerate launch`` reads the rendered accelerate.yaml and starts its ranks.

    One machine: a multi-node rendezvous needs the fake host names to resolve (the multi-node
    argv goes through accelerate's own parser in test_launcher_parsers.py, and runs for real on
    the Slurm testbed in tests/slurm)."""
    (tmp_path / "train.py").write_text(TRAIN_RECORDER)
    run_dir = render(ck, tmp_path, "--site", "local", "--launcher", "accelerate")
    logs = execute(run_dir, tmp_path, nodelist="localhost", nnodes=1, timeout=600)   # accelerate imports torch
    ranks = trained(logs)
    assert sorted(ranks) == [0, 1]
    for rank, got in ranks.items():
        assert got["argv"] == HOSTILE and got["env"]["WORLD_SIZE"] == "2" and got["env"]["LOCAL_RANK"] == str(rank)
    cfg = yaml.safe_load((run_dir / "accelerate.yaml").read_text())
    assert (cfg["num_machines"], cfg["num_processes"], cfg["distributed_type"]) == (1, 2, "MULTI_GPU")


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
                     "megatron", "--set", "tp=4", "--set", "pp=2",
                     command=["python", "pretrain_gpt.py", "--seq-length", "4096"])
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


PREEMPTED_SCONTROL = """#!/bin/bash
# Test stand-in for scontrol during a preemption: the job shows its PreemptTime, and a requeue
# is refused (Slurm is requeueing the preempted run itself).
case "$1 $2" in
  "show hostnames") exec "$REAL_FAKEBIN/scontrol" "$@" ;;
  "-o show") echo "JobId=$SLURM_JOB_ID JobState=RUNNING PreemptTime=2026-12-01T19:50:59 Restarts=0" ;;
  "requeue $SLURM_JOB_ID") echo "scontrol requeue $2" >> "$FAKE_LOG_DIR/scontrol.log"
             echo "Requested operation is presently disabled for job $2" >&2; exit 1 ;;
  *) echo "scontrol $*" >> "$FAKE_LOG_DIR/scontrol.log" ;;
esac
"""


def test_a_preempted_run_whose_requeue_slurm_refuses_writes_no_result(ck, tmp_path: Path) -> None:
    """Slurm requeues a preempted run itself after its grace time and refuses ours meanwhile:
    the script must not write a final result (that would end the job for good); it waits for
    Slurm's TERM."""
    import signal
    import time

    run_dir = render(ck, tmp_path, "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
                     "--launcher", "srun", command=["true"])
    stand_in = tmp_path / "preempted-bin"
    stand_in.mkdir()
    (stand_in / "scontrol").write_text(PREEMPTED_SCONTROL)
    (stand_in / "scontrol").chmod(0o755)
    logs = tmp_path / "fakelogs"
    logs.mkdir()
    env = dict(os.environ, PATH=f"{stand_in}:{FAKEBIN}:{os.environ['PATH']}", REAL_FAKEBIN=str(FAKEBIN),
               FAKE_LOG_DIR=str(logs), SLURM_JOB_ID="4321", SLURM_JOB_NODELIST="node[1-2]", SLURM_NNODES="2")
    with subprocess.Popen(["bash", str(run_dir / "job.sbatch")], cwd=tmp_path, env=env, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as p:
        assert p.stderr is not None
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = p.stderr.readline()
            seen.append(line)
            if "no result is written" in line or not line:
                break
        assert any("scontrol requeue refused while Slurm preempts this run" in ln for ln in seen), seen
        time.sleep(0.5)
        assert p.poll() is None, "the script ended before Slurm did"
        os.killpg(p.pid, signal.SIGTERM)  # Slurm's TERM at the end of the grace time
        assert p.wait(timeout=30) == -signal.SIGTERM  # untrapped: the TERM ends it, as Slurm means it to
    assert "scontrol requeue 4321" in (logs / "scontrol.log").read_text()
    assert not list(run_dir.glob("*.result")), "a preempted run wrote a final result"


# Per rank, the environment a worker started over pdsh sees (its shell is clean: only what the
# pdsh line exports arrives); written into the working directory the runner cd's to.
PDSH_RECORDER = """import json, os
keys = ("RANK", "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "NCCL_DEBUG_FILE", "NCCL_DEBUG",
        "CLUSTERKIT_LAB_NODE")
with open("pdsh-rank." + os.environ["RANK"] + ".json", "w") as fh:
    json.dump({k: os.environ.get(k) for k in keys}, fh)
"""


@pytest.mark.e2e  # the real launcher starts its ranks
@pytest.mark.parametrize("out", ["run", "run dir"])
def test_deepspeed_pdsh_carries_the_per_job_dump_path(ck, tmp_path: Path, out: str) -> None:
    """The real deepspeed runner with --launcher pdsh, over the pdsh and ssh stand-ins of fakebin-pdsh
    (pdsh: the remote line in a clean bash per host; ssh: DeepSpeed's reachability probe): the
    workers see the flight-recorder prefix the batch shell expanded for this job; a run directory
    with a space cannot be carried, so it is left out with one line, and nothing breaks."""
    (tmp_path / "train.py").write_text(PDSH_RECORDER)
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 1}\n')
    site = shared_site(tmp_path / "sites", "ib-h100", tmp_path)
    run_dir = render(ck, tmp_path, "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
                     "--launcher", "deepspeed", "--set", "ds_launcher=pdsh", "--set", "container=false",
                     "--set", "max_restarts=0", "--debug",
                     command=["python", "train.py", "--deepspeed_config", str(tmp_path / "ds.json")], out=out)
    env = dict(os.environ, PATH=f"{FAKEBIN}-pdsh:{FAKEBIN}:{os.environ['PATH']}", FAKE_LOG_DIR=str(tmp_path),
               SLURM_JOB_ID="4321", SLURM_JOB_NODELIST="h100-[01-02]", SLURM_NNODES="2")
    p = subprocess.run(["bash", str(run_dir / "job.sbatch")], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    ranks = {f.name: json.loads(f.read_text()) for f in tmp_path.glob("pdsh-rank.*.json")}
    assert sorted(ranks) == ["pdsh-rank.0.json", "pdsh-rank.1.json"], p.stderr
    copy = run_dir / ".deepspeed_env.4321.r0"
    lines = copy.read_text().splitlines()
    # the job's probe keeps the flight-recorder names this torch reads (2.7+: TORCH_FR_*), in the copy too
    torch_v = tuple(int(x) for x in importlib.metadata.version("torch").split(".")[:2])
    new = torch_v >= (2, 7)
    dropped = ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE") if new else \
        ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE")
    kept_dump = "TORCH_FR_DUMP_TEMP_FILE" if new else "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
    rendered = [ln for ln in (run_dir / ".deepspeed_env").read_text().splitlines() if not ln.startswith(dropped)]
    assert lines[:len(rendered)] == rendered          # the rendered file, then the run-time values
    assert not [ln for ln in lines if ln.startswith(dropped)]
    left_out = [ln for ln in p.stderr.splitlines() if "ds_launcher=pdsh:" in ln and "left out" in ln]
    if out == "run":
        prefix = f"{run_dir}/logs/fr-4321.r0.rank"
        assert f"{kept_dump}={prefix}" in lines
        # pdsh substitutes %h itself and turns %% into %: the file doubles them, NCCL gets %h and %p
        assert f"NCCL_DEBUG_FILE={run_dir}/logs/nccl-4321.r0.%%h.%%p.log" in lines
        for got in ranks.values():
            assert got[kept_dump] == prefix and all(got.get(n) is None for n in dropped)
            assert got["NCCL_DEBUG"] == "INFO"
            assert got["NCCL_DEBUG_FILE"] == f"{run_dir}/logs/nccl-4321.r0.%h.%p.log"
        assert left_out == []
    else:
        assert not any(ln.startswith(("TORCH_FR_DUMP_TEMP_FILE=", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=")) for ln in lines)
        assert sorted(ln.split(" left out")[0].rsplit(" ", 1)[1] for ln in left_out) == \
            ["NCCL_DEBUG_FILE", "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]
        for got in ranks.values():   # torch's default then; the rest of the file still arrives whole
            assert got["TORCH_FR_DUMP_TEMP_FILE"] is None and got["NCCL_DEBUG"] == "INFO"
