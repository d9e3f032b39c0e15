"""A rank for the job-environment tests: writes what it sees (its node, its rank, the job's
environment values) to MARK_DIR/rank<RANK>.json, as a training script reads its environment."""

import json
import os
import sys
from pathlib import Path

keys = ("RANK", "SLURM_NODEID", "SLURMD_NODENAME", "PER_NODE", "LITERAL", "FROM_FILE", "FROM_SETUP", "NCCL_DEBUG")
seen = {k: os.environ.get(k) for k in keys}
out = Path(os.environ["MARK_DIR"]) / f"rank{os.environ['RANK']}.json"
out.write_text(json.dumps(seen))
print(f"job_env_rank {os.environ['RANK']} on {seen['SLURMD_NODENAME']}: PER_NODE={seen['PER_NODE']}", flush=True)
sys.exit(0)
