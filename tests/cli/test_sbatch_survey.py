"""The twelve real multi-node scripts of docs/sbatch-survey.md, each translated into one
``clusterkit submit`` line: the dry run succeeds and the rendered job.sbatch holds the items the
survey counts as carried.  Only the translations are here (the scripts are linked from the doc)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO

FILES = ("cli.py", "pretrain_gpt.py", "scripts/train.py", "mnist_accelerate.py", "tf2_keras_cifar_hvd.py",
         "test_horovod.py", "minimal_multi_node_demo.py", "train.py", "main1.py", "train_bert_ds.py",
         "scripts/sft.py", "recipes/zephyr-7b-beta/sft/config_full.yaml", "train_configs/llama2_70b.toml",
         "configs/train/default.toml")

# the site keys script 2 needs: its image, run with `singularity run --nv` (the image's runscript)
SINGULARITY = "container: {runtime: singularity, image: /containers/nemo-25.02.rc0.simg, runscript: true}"

# a one-machine accelerate config such as script 12 names (ZeRO-3 through DeepSpeed)
ZERO3 = """\
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  deepspeed_multinode_launcher: standard
  zero3_init_flag: true
  zero_stage: 3
mixed_precision: bf16
machine_rank: 0
num_machines: 1
num_processes: 8
rdzv_backend: static
same_network: true
use_cpu: false
"""

# (name, argv after `submit --dry-run`, strings the rendered job.sbatch must hold)
CASES: list[tuple[str, list[str], list[str]]] = [
    ("ruunyox-pytorch-hpc", ["--site", "testbed", "--nodes", "2", "--gpus-per-node", "4", "--launcher", "srun",
      "--job-name", "cli_test_multi_node_multi_gpu", "--set", "time=00:30:00", "--set", "cpus_per_task=4",
      "--set", "gpu_type=A100", "--sbatch", "mem-per-cpu=1G", "--conda", "YOUR_PYTORCH_ENV", "--",
      "python", "cli.py", "--config", "cfg.yaml", "fit"],
     ["#SBATCH --job-name=cli_test_multi_node_multi_gpu", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4",
      "#SBATCH --gpus-per-node=A100:4", "#SBATCH --cpus-per-task=4", "#SBATCH --mem-per-cpu=1G",
      "#SBATCH --time=00:30:00", "conda activate YOUR_PYTORCH_ENV"]),
    ("kempner-nemo-workflows-megatron", ["--site", "@sing.yaml", "--nodes", "2", "--gpus-per-node", "4",
      "--launcher", "torchrun", "--job-name", "gpt-meg", "--set", "time=02:35:00", "--set", "cpus_per_task=24",
      "--sbatch", "mem=0", "--env", "CUDA_DEVICE_MAX_CONNECTIONS=1", "--env", "TP_SIZE=4", "--env", "PP_SIZE=2",
      "--setup", "env | grep -i python", "--srun-arg=--label", "--", "python", "/opt/megatron-lm/pretrain_gpt.py",
      "--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "2", "--fp16",
      "--save", "./model_checkpoint", "--tensorboard-dir", "./experiments/tensorboard"],
     ["#SBATCH --job-name=gpt-meg", "#SBATCH --mem=0", "#SBATCH --cpus-per-task=24", "#SBATCH --time=02:35:00",
      "export CUDA_DEVICE_MAX_CONNECTIONS=1", "export PP_SIZE=2", "--label",
      "singularity run --nv", "/containers/nemo-25.02.rc0.simg torchrun", "--nproc-per-node 4",
      "/opt/megatron-lm/pretrain_gpt.py", "--pipeline-model-parallel-size 2"]),
    ("kempnerforge", ["--site", "testbed", "--nodes", "2", "--gpus-per-node", "4", "--launcher", "torchrun",
      "--job-name", "kempnerforge", "--set", "partition=kempner_h100", "--set", "account=kempner_dev",
      "--set", "cpus_per_task=16", "--sbatch", "mem=256G", "--set", "time=48:00:00",
      "--env", "TORCH_NCCL_AVOID_RECORD_STREAMS=1", "--env", "NCCL_IB_DISABLE=0", "--env", "NCCL_NET_GDR_LEVEL=2",
      "--env", "NCCL_IB_GID_INDEX=3", "--env", "NCCL_TIMEOUT=600", "--setup", "uv sync", "--venv", ".venv",
      "--", "python", "scripts/train.py", "configs/train/default.toml"],
     ["#SBATCH --partition=kempner_h100", "#SBATCH --account=kempner_dev", "#SBATCH --mem=256G",
      "#SBATCH --time=48:00:00", "#SBATCH --requeue", "--kill-on-bad-exit=1", "export NCCL_IB_GID_INDEX=3",
      "export NCCL_TIMEOUT=600", ". .venv/bin/activate", "uv sync", "--rdzv-id \"$SLURM_JOB_ID\""]),
    ("csc-pytorch-ddp-examples-accelerate", ["--site", "@ib.yaml", "--nodes", "2", "--gpus-per-node", "4",
      "--launcher", "accelerate", "--set", "account=project_2001659", "--set", "partition=gputest",
      "--set", "cpus_per_task=40", "--sbatch", "mem=0", "--set", "time=00:15:00", "--set", "gpu_type=v100",
      "--module", "purge", "--module", "pytorch", "--launcher-arg=--mixed_precision=no",
      "--launcher-arg=--dynamo_backend=no",
      "--", "python", "mnist_accelerate.py", "--epochs=100"],
     ["#SBATCH --account=project_2001659", "#SBATCH --gpus-per-node=v100:4", "#SBATCH --time=00:15:00",
      "module purge ||", "module load pytorch", "--num_machines 2 --num_processes 8",
      "--machine_rank \"$SLURM_NODEID\"",
      "--mixed_precision=no --dynamo_backend=no", "CK_RDZV_RESOLVE"]),
    ("poisson-cnn-horovod", ["--site", "testbed", "--nodes", "2", "--gpus-per-node", "4", "--launcher", "horovod",
      "--set", "max_restarts=0", "--job-name", "horovod-multinode", "--set", "cpus_per_task=40",
      "--set", "time=00:50:00", "--module", "purge", "--module", "gcc/8.3.0", "--module", "python/3.7.4_ML",
      "--launcher-arg=--start-timeout=120", "--launcher-arg=--gloo-timeout-seconds=120",
      "--launcher-arg=--network-interface=ib0", "--launcher-arg=--gloo", "--",
      "python3.7", "tf2_keras_cifar_hvd.py", "--epochs", "10", "--batch_size", "512"],
     ["#SBATCH --job-name=horovod-multinode", "#SBATCH --cpus-per-task=40", "module purge ||", "module load gcc/8.3.0",
      "horovodrun -np 8", "--start-timeout=120 --gloo-timeout-seconds=120 --network-interface=ib0 --gloo"]),
    ("ulhpc-tutorials-horovod-mpirun", ["--site", "testbed", "--nodes", "2", "--gpus-per-node", "4",
      "--launcher", "mpirun", "--set", "max_restarts=0", "--set", "cpus_per_task=2", "--set", "partition=gpu",
      "--set", "time=00:30:00", "--", "python", "test_horovod.py"],
     ["#SBATCH --partition=gpu", "#SBATCH --nodes=2", "#SBATCH --cpus-per-task=2", "#SBATCH --time=00:30:00",
      "mpirun", "-np 8"]),
    ("lightning-multi-node-demo", ["--site", "testbed", "--nodes", "4", "--gpus-per-node", "4", "--launcher", "srun",
      "--sbatch", "mem=0", "--set", "time=02:00:00", "--conda", "my_env", "--",
      "python", "minimal_multi_node_demo.py"],
     ["#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=4", "#SBATCH --mem=0", "#SBATCH --time=02:00:00",
      "conda activate my_env", "--ntasks=16"]),
    ("megatron-deepspeed-slurm-template", ["--site", "testbed", "--nodes", "2", "--gpus-per-node", "8",
      "--launcher", "torchrun", "--job-name", "megatron", "--set", "partition=batch", "--set", "time=23:59:59",
      "--sbatch", "exclusive", "--", "python", "pretrain_gpt.py"],
     ["#SBATCH --job-name=megatron", "#SBATCH --gpus-per-node=8", "#SBATCH --exclusive",
      "#SBATCH --time=23:59:59", "--ntasks-per-node=1"]),
    ("torchtitan-8node", ["--site", "ib-h100", "--nodes", "8", "--launcher", "torchrun", "--set", "partition=llm_s",
      "--sbatch", "nodelist=HOST-10-140-60-[1-8]", "--launcher-arg=--local-ranks-filter=0", "--", "python", "train.py",
      "--job.config_file", "train_configs/llama2_70b.toml"],
     ["#SBATCH --partition=llm_s", "#SBATCH --nodes=8", "#SBATCH --nodelist=HOST-10-140-60-[1-8]",
      "--nproc-per-node 8", "--rdzv-backend c10d",
      "--local-ranks-filter=0", "--job.config_file"]),
    ("deepseek-slurm-main2", ["--site", "testbed", "--nodes", "2", "--gpus-per-node", "2", "--sbatch", "mem=20G",
      "--module", "python", "--conda", "env", "--launcher", "torchrun", "--", "python", "main1.py"],
     ["#SBATCH --nodes=2", "#SBATCH --gpus-per-node=2", "#SBATCH --mem=20G", "module load python",
      "conda activate env", "--nproc-per-node 2"]),
    ("hellodeepspeed-no-ssh", ["--site", "testbed", "--nodes", "2", "--launcher", "deepspeed",
      "--set", "ds_args=none", "--",
      "python", "train_bert_ds.py", "--checkpoint_dir", "./experiment_deepspeed"],
     ["#SBATCH --nodes=2", "exec deepspeed --hostfile \"$CK_HOSTFILE\" --no_ssh --node_rank \"$SLURM_NODEID\"",
      "train_bert_ds.py --checkpoint_dir ./experiment_deepspeed\n"]),
    ("alignment-handbook-launch", ["--site", "efa-p5", "--nodes", "2", "--launcher", "accelerate",
      "--job-name", "handbook", "--sbatch", "exclusive", "--set", "partition=hopper-prod", "--set", "time=3-00:00:00",
      "--module", "cuda/12.9", "--venv", "handbook", "--setup", "source ~/.bashrc",
      "--env", "NCCL_ASYNC_ERROR_HANDLING=1", "--env", "ACCELERATE_LOG_LEVEL=info",
      "--env", "TRANSFORMERS_VERBOSITY=info",
      "--launcher-arg=--config_file=recipes/accelerate_configs/zero3.yaml",
      "--launcher-arg=--gradient_accumulation_steps=4", "--launcher-arg=--max_restarts=1", "--launcher-arg=--tee=3",
      "--srun-arg=--wait=60", "--",
      "python", "scripts/sft.py", "--config", "recipes/zephyr-7b-beta/sft/config_full.yaml"],
     ["#SBATCH --job-name=handbook", "#SBATCH --partition=hopper-prod", "#SBATCH --time=3-00:00:00",
      "#SBATCH --gpus-per-node=8", "#SBATCH --exclusive", "#SBATCH --requeue", "module load cuda/12.9",
      ". handbook/bin/activate", "source ~/.bashrc", "export NCCL_ASYNC_ERROR_HANDLING=1",
      "export ACCELERATE_LOG_LEVEL=info", "--kill-on-bad-exit=1", "--wait=60", "--num_machines 2 --num_processes 16",
      "--machine_rank \"$SLURM_NODEID\"", "--deepspeed_multinode_launcher standard",
      "--gradient_accumulation_steps=4 --max_restarts=1 --tee=3", "scripts/sft.py"]),
]


@pytest.mark.parametrize(("name", "argv", "carried"), CASES, ids=[c[0] for c in CASES])
def test_translation_renders_what_it_carries(ck, tmp_path: Path, name: str, argv: list[str],
                                             carried: list[str]) -> None:
    for rel in FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    (tmp_path / "recipes/accelerate_configs").mkdir(parents=True)
    (tmp_path / "recipes/accelerate_configs/zero3.yaml").write_text(ZERO3)
    base = f"extends: {REPO / 'site_configs' / 'testbed.yaml'}\n"
    (tmp_path / "sing.yaml").write_text(f"name: sing\n{base}software:\n  {SINGULARITY}\n")
    (tmp_path / "ib.yaml").write_text(f"name: ib\n{base}network:\n  rendezvous_host: {{interface: ib0}}\n")
    argv = [str(tmp_path / a[1:]) if a.startswith("@") else a for a in argv]
    result = ck("submit", "--dry-run", *argv, cwd=tmp_path)
    assert result.code == 0, result.err
    for item in carried:
        assert item in result.out, f"{name}: {item!r} not in the rendered job.sbatch"
