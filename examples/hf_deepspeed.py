"""A Trainer-style DeepSpeed job: transformers' own argument parser owns ``--deepspeed PATH``.

Hugging Face scripts declare their options through ``TrainingArguments``; its ``--deepspeed``
takes the config file's path (DeepSpeed's own ``--deepspeed`` is a bare flag), and the
``deepspeed`` launcher adds ``--local_rank=N``, which TrainingArguments also owns.  This script
parses its argv exactly that way, reads the config it was given, joins the process group with
gloo (CPU), all-reduces, and checks that every rank read the same config:

    clusterkit submit --site testbed --stage multi-node --nodes 2 --gpus-per-node 2 \\
        --launcher deepspeed -- python examples/hf_deepspeed.py --output_dir out --use_cpu \\
        --deepspeed ds_config.json

Each rank prints the same line as examples/allreduce.py, plus
``hf_deepspeed rank R: --deepspeed PATH stage=S local_rank=L``.
"""

from __future__ import annotations

import datetime
import json
import os
import sys

from allreduce import check_sum, say


def main() -> int:
    import deepspeed
    import torch
    import torch.distributed as dist
    from transformers import HfArgumentParser, TrainingArguments

    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
    with open(args.deepspeed) as fh:
        config = json.load(fh)
    stage = config.get("zero_optimization", {}).get("stage")
    # CPU ranks: gloo. DeepSpeed's launcher set RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT.
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    say(f"hf_deepspeed rank {rank}: --deepspeed {args.deepspeed} stage={stage} local_rank={args.local_rank}")
    try:
        # every rank must have read the same file: sum the stage each one saw
        seen = stage if isinstance(stage, int) else -100
        stages = torch.tensor([float(seen)])
        dist.all_reduce(stages, op=dist.ReduceOp.SUM)
        env_ok = os.environ.get("CK_DS_CONFIG") == os.path.abspath(args.deepspeed)
        return check_sum(rank, world, also_ok=int(stages.item()) == world * seen and env_ok)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
