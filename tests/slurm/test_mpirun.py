"""``--launcher mpirun`` on the testbed: Open MPI's real mpirun (Debian's openmpi-bin) on the batch
host starts its daemons on both nodes through Slurm's srun; each rank reads Open MPI's
OMPI_COMM_WORLD_RANK/SIZE, and torch's RANK/WORLD_SIZE that clusterkit's rank wrapper sets from
them, and the ranks meet in a gloo all-reduce at the job's rendezvous host.  The testbed runs
jobs as root: mpirun refuses root unless told, and the job script tells it only then."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .conftest import CK

pytest.importorskip("torch", reason="examples/allreduce.py needs torch (pip install torch, CPU build)")
if shutil.which("mpirun") is None:
    pytest.skip("Open MPI's mpirun is not installed (apt-get install openmpi-bin)", allow_module_level=True)

RANK = Path(__file__).resolve().parent / "mpi_rank.py"


def test_mpirun_on_two_nodes_allreduce(cli: CK) -> None:
    run_dir = cli.runs / "mpirun"
    marks = cli.runs / "mpirun-marks"
    marks.mkdir(parents=True)
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "2",
               "--launcher", "mpirun", "--set", "max_restarts=0", "--env", f"MARK_DIR={marks}",
               "--out", str(run_dir), "--wait", "--", "python", str(RANK), timeout=240)
    logs = "".join(p.read_text() for p in sorted((run_dir / "logs").glob("*")) if p.is_file())
    assert proc.returncode == 0, proc.stdout + proc.stderr + logs[-3000:]
    hosts = [line.split()[0] for line in (run_dir / "hostfile").read_text().splitlines()]
    assert (run_dir / "hostfile").read_text() == "".join(f"{h} slots=2\n" for h in hosts) and len(set(hosts)) == 2
    seen = {int(p.stem[4:]): json.loads(p.read_text()) for p in marks.glob("rank*.json")}
    assert sorted(seen) == [0, 1, 2, 3], logs[-3000:]
    for rank, s in seen.items():
        assert s["OMPI_COMM_WORLD_SIZE"] == s["WORLD_SIZE"] == "4"
        assert s["RANK"] == str(rank) and s["LOCAL_RANK"] == s["OMPI_COMM_WORLD_LOCAL_RANK"] == str(rank % 2)
        assert s["MASTER_ADDR"] == hosts[0]   # the job's rendezvous host, the first of its hosts
        # the cadence the job exports reaches the ranks on the second host too (mpirun's daemons start
        # through srun, which carries the batch shell's environment)
        assert s["CK_CHECKPOINT_INTERVAL_S"] == str(json.loads((run_dir / "plan.json").read_text())
                                                    ["cadence"]["interval_s"]), s
    # --map-by ppr:2:node: ranks 0-1 on the first host, 2-3 on the second
    assert [seen[r]["host"] for r in range(4)] == [hosts[0], hosts[0], hosts[1], hosts[1]], (seen, logs[-6000:])
    assert "allreduce OK: world_size=4 sum=10" in logs
