"""Flight-recorder dumps and ``--debug``'s NCCL files above the site's ``logs.debug_max_nodes``, on the
Slurm testbed: each goes to its node's own folder (``logs.node_local_dir``), and after the failed
attempt the supervisor copies back only the dump of the rank doctor names and the NCCL files of its
node, through one ``srun --overlap`` step on that node.  The ranks write their dump and NCCL file
where the job told torch and NCCL to (``TORCH_FR_DUMP_TEMP_FILE`` + rank, ``NCCL_DEBUG_FILE`` with
``%h``/``%p``), standing in for them (no GPU, no NCCL here); then rank 1 raises."""

from __future__ import annotations

import re
import time
from pathlib import Path

import yaml

from .conftest import CK, REPO

TRAIN = """import os, pathlib, socket, time
rank = int(os.environ["RANK"])
nccl = os.environ["NCCL_DEBUG_FILE"].replace("%h", socket.gethostname()).replace("%p", str(os.getpid()))
pathlib.Path(nccl).write_text(f"NCCL INFO stand-in of rank {rank} on {os.environ['SLURMD_NODENAME']}\\n")
stem = os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]
pathlib.Path(f"{stem}{rank}").write_text(f"stand-in dump of rank {rank}\\n")
print(f"dumped rank {rank} to {stem}{rank}", flush=True)
if rank == 1:   # once rank 0 has dumped too (every testbed node sees this machine's disk)
    end = time.monotonic() + 120
    while not pathlib.Path(f"{stem}0").exists() and time.monotonic() < end:
        time.sleep(0.1)
    {}["missing_key"]
time.sleep(300)
"""


def test_only_the_named_rank_s_dump_is_copied_back(cli: CK, tmp_path: Path) -> None:
    local = tmp_path / "nodelocal"
    local.mkdir(mode=0o777)
    local.chmod(0o1777)
    data = yaml.safe_load((REPO / "site_configs" / "testbed.yaml").read_text())
    data["name"] = "testbed-fr"
    data["logs"] = {"debug_max_nodes": 1, "node_local_dir": str(local)}
    site = tmp_path / "testbed-fr.yaml"
    site.write_text(yaml.safe_dump(data))
    (tmp_path / "train.py").write_text(TRAIN)
    run_dir = cli.runs / f"fr-copyback-{time.time_ns()}"
    cli.bed.wait_idle()
    proc = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
               "--launcher", "torchrun", "--debug", "--out", str(run_dir), "--wait",
               "--", "python", str(tmp_path / "train.py"), timeout=180)
    batch = "".join(p.read_text(errors="replace") for p in (run_dir / "logs").glob("slurm-*.out"))
    assert proc.returncode == 1, proc.stdout + proc.stderr + batch[-4000:]
    m = re.search(r"Submitted job (\d+)", proc.stdout)
    assert m, proc.stdout
    job = m.group(1)
    names = sorted(p.name for p in local.glob("clusterkit-fr-*"))   # beside torchrun's node-local folder
    assert names == [f"clusterkit-fr-{job}.r0.rank0", f"clusterkit-fr-{job}.r0.rank1"], names
    copied = sorted(p.name for p in (run_dir / "logs").glob("fr-*"))
    assert copied == [f"fr-{job}.r0.rank1"], (copied, batch[-4000:])
    assert (run_dir / "logs" / copied[0]).read_text() == "stand-in dump of rank 1\n"
    assert f"copy back: rank 1 on node2: copied to fr-{job}.r0.rank1 (24 bytes)" in batch, batch[-4000:]
    # and the NCCL files of rank 1's node, named by its Slurm name and the process number.  Every testbed
    # node is this machine, so the "node-local" folder is one folder that node2's task sees whole: both
    # ranks' files come back under node2's name (on a cluster node2's disk holds node2's alone); what
    # shows that only node2 was asked is that no task on node1 said anything
    local_nccl = {p.name.rsplit(".", 2)[1] for p in local.glob(f"clusterkit-nccl-{job}.r0.*.log")}
    nccl = sorted(p.name for p in (run_dir / "logs").glob("nccl-*"))
    assert len(local_nccl) == 2 and nccl == sorted(f"nccl-{job}.r0.node2.{pid}.log" for pid in local_nccl), nccl
    said = [ln for ln in batch.splitlines() if "copy back: " in ln]
    assert len(said) == 3 and all(" on node2: " in ln for ln in said), said
    assert "NCCL INFO stand-in of rank 1 on node2\n" in [(run_dir / "logs" / n).read_text() for n in nccl]
