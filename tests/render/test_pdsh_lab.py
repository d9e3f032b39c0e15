"""ds_launcher=pdsh with the real pdsh (``-R ssh``, as DeepSpeed's runner sets it) and the real
deepspeed runner, against the SSH lab's sshd nodes (tests/sshlab): the rendered job script runs
inside the lab's network namespace, DeepSpeed reaches both nodes over pdsh and ssh (the lab's
client config through an ``ssh`` on PATH that adds ``-F`` to the real ssh), and each node's
``deepspeed.launcher.launch`` starts the recording training script.  What reaches the ranks is
what pdsh made of the per-attempt ``.deepspeed_env``: NCCL_DEBUG_FILE with NCCL's own ``%h``
and ``%p``, the flight-recorder prefix of this job.  Slurm's side (``scontrol show hostnames``)
is fakebin's stand-in; the batch shell is this machine."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import shared_site
from tests.render.test_execute import FAKEBIN, PDSH_RECORDER, render

HOSTS = ("h100-01", "h100-02")


@pytest.mark.skipif(shutil.which("pdsh") is None, reason="pdsh not installed (Debian package pdsh)")
def test_real_pdsh_carries_nccl_debug_file_and_the_dump_prefix(ck, tmp_path: Path, sshlab_factory) -> None:
    lab = sshlab_factory(dict.fromkeys(HOSTS, "_runner_echo"))
    (tmp_path / "train.py").write_text(PDSH_RECORDER)
    (tmp_path / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 1}\n')
    site = shared_site(tmp_path / "sites", "ib-h100", tmp_path)
    run_dir = render(ck, tmp_path, "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
                     "--launcher", "deepspeed", "--set", "ds_launcher=pdsh", "--set", "container=false",
                     "--set", "max_restarts=0", "--debug",
                     command=["python", "train.py", "--deepspeed_config", str(tmp_path / "ds.json")])
    ssh_dir = tmp_path / "ssh-bin"
    ssh_dir.mkdir()
    (ssh_dir / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {lab.ssh_config} "$@"\n')
    (ssh_dir / "ssh").chmod(0o755)
    env = lab.env(PATH=f"{ssh_dir}:{FAKEBIN}:{os.environ['PATH']}", FAKE_LOG_DIR=str(tmp_path),
                  SLURM_JOB_ID="4321", SLURM_JOB_NODELIST="h100-[01-02]", SLURM_NNODES="2")
    p = lab.run(["bash", str(run_dir / "job.sbatch")], cwd=tmp_path, env=env, capture_output=True, text=True,
                timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    ranks = {f.name: json.loads(f.read_text()) for f in tmp_path.glob("pdsh-rank.*.json")}
    assert sorted(ranks) == ["pdsh-rank.0.json", "pdsh-rank.1.json"], p.stderr[-3000:]
    # the ranks ran on the lab's nodes, reached through sshd (its node wrapper names them)
    assert {r["CLUSTERKIT_LAB_NODE"] for r in ranks.values()} == set(HOSTS)
    new = tuple(int(x) for x in importlib.metadata.version("torch").split(".")[:2]) >= (2, 7)
    dump = "TORCH_FR_DUMP_TEMP_FILE" if new else "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
    for got in ranks.values():
        assert got["NCCL_DEBUG_FILE"] == f"{run_dir}/logs/nccl-4321.r0.%h.%p.log"    # NCCL fills in %h, %p
        assert got[dump] == f"{run_dir}/logs/fr-4321.r0.rank"
        assert got["NCCL_DEBUG"] == "INFO"
    assert not [ln for ln in p.stderr.splitlines() if "left out" in ln]
