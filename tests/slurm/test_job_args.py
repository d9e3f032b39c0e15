"""``--srun-arg``, ``--sbatch`` and a user's own accelerate config with ZeRO-3, on the testbed.

Real Slurm throughout: srun's ``--label`` reaches the launch step and prefixes every line of its
log with the task number; a ``--sbatch constraint`` no node has is refused by sbatch itself and
shown as Slurm's reason in one line; a user's accelerate config with ``distributed_type:
DEEPSPEED`` and ZeRO stage 3 runs on 2 nodes with the real accelerate and deepspeed (CPU, gloo).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import CK

pytest.importorskip("torch", reason="examples/allreduce.py needs torch (pip install torch, CPU build)")


def _logs(run_dir: Path) -> str:
    return "".join(p.read_text() for p in sorted((run_dir / "logs").glob("*.out")))


def test_srun_label_reaches_the_launch_step(cli: CK) -> None:
    run_dir = cli.runs / "label"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--launcher", "torchrun", "--srun-arg=--label", "--out", str(run_dir), "--wait",
               "--", "python", "examples/allreduce.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^ *srun .* --label \\$", (run_dir / "job.sbatch").read_text(), re.M)
    # one log per node; srun prefixed each line with the task (one task per node: 0 and 1), after
    # torchrun's --tee prefix of the rank
    line = re.compile(r"^ *(\d+): \[rank\d\]: allreduce rank (\d)/2 on (\S+): sum=3 expected=3 ok$", re.M)
    lines = line.findall(_logs(run_dir))
    assert sorted((task, rank) for task, rank, _host in lines) == [("0", "0"), ("1", "1")], _logs(run_dir)[-2000:]
    assert {host for *_, host in lines} == {"node1", "node2"}


def test_sbatch_constraint_no_node_has_is_slurms_refusal(cli: CK) -> None:
    run_dir = cli.runs / "constraint"
    proc = cli("submit", "--site", "testbed", "--launcher", "srun", "--sbatch", "constraint=nosuchfeature",
               "--out", str(run_dir), "--", "true")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr == "clusterkit: error: sbatch refused the job: Invalid feature specification\n"
    assert "#SBATCH --constraint=nosuchfeature\n" in (run_dir / "job.sbatch").read_text()
    assert cli.records() == []


ZERO3 = """compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  zero_stage: 3
  gradient_accumulation_steps: 1
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: false
mixed_precision: 'no'
num_machines: 2
num_processes: 2
machine_rank: 0
main_training_function: main
rdzv_backend: static
same_network: true
use_cpu: false
"""


def test_users_accelerate_config_with_zero3_on_two_nodes(cli: CK, tmp_path: Path) -> None:
    pytest.importorskip("deepspeed", reason="deepspeed is in the test extra")
    pytest.importorskip("accelerate", reason="accelerate is in the test extra")
    config = tmp_path / "zero3.yaml"
    # written for one machine (issue 40): the rendered copy carries the job's counts
    config.write_text(ZERO3.replace("num_machines: 2", "num_machines: 1").replace("num_processes: 2",
                                                                                 "num_processes: 1"))
    run_dir = cli.runs / "zero3"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--launcher", "accelerate", f"--launcher-arg=--config_file={config}", "--out", str(run_dir),
               "--wait", "--", "python", "examples/accelerate_zero3.py",
               env=cli.env(DS_ACCELERATOR="cpu"), timeout=560)
    logs = _logs(run_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr + logs[-3000:]
    copy = (run_dir / "accelerate.yaml").read_text()
    assert "num_machines: 2\n" in copy and "num_processes: 2\n" in copy and "zero_stage: 3\n" in copy
    seen = re.findall(r"^zero3 rank (\d)/2: stage=3 partitioned=(\d+)/(\d+) loss \S+ -> \S+$", logs, re.M)
    assert sorted(r for r, _, _ in seen) == ["0", "1"], logs[-3000:]
    # ZeRO-3: each rank held about half of the model's parameters
    assert all(0 < int(held) < int(total) for _, held, total in seen)
    assert "allreduce OK: world_size=2 sum=3" in logs
