"""A rank for the mpirun test: writes what Open MPI and clusterkit's rank wrapper told it
(OMPI_COMM_WORLD_RANK/SIZE, torch's RANK/LOCAL_RANK/WORLD_SIZE, the checkpoint cadence, its host) to
MARK_DIR/rank<OMPI_COMM_WORLD_RANK>.json, then runs examples/allreduce.py's gloo all-reduce."""

import json
import os
import runpy
import socket
import sys
from pathlib import Path

env = os.environ
seen = {k: env.get(k) for k in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                 "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                 "CK_CHECKPOINT_INTERVAL_S")}
seen["host"] = socket.gethostname()
seen["slurmd"] = env.get("SLURMD_NODENAME")
(Path(env["MARK_DIR"]) / f"rank{env['OMPI_COMM_WORLD_RANK']}.json").write_text(json.dumps(seen))
sys.argv = ["allreduce.py"]
runpy.run_path(str(Path(__file__).resolve().parents[2] / "examples" / "allreduce.py"), run_name="__main__")
