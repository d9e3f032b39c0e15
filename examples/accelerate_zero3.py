"""An Accelerate + DeepSpeed ZeRO-3 job: the user's own ``accelerate launch --config_file``.

The config (``distributed_type: DEEPSPEED``, ``deepspeed_config: {zero_stage: 3}``) is the
user's; clusterkit reads it before queueing, checks its machine and process counts against the
job, and starts one ``accelerate launch`` per node with the node's rank and the rendezvous on
the command line.  Each rank builds a small model, lets ``Accelerator.prepare`` hand it to
DeepSpeed (ZeRO stage 3: every parameter partitioned across the ranks), trains three epochs
over a small data set, checks that the loss on a fixed batch fell and that each rank holds only
its share of the parameters, then all-reduces as examples/allreduce.py does.  Runs on CPU
(``DS_ACCELERATOR=cpu``, gloo):

    clusterkit submit --site testbed --stage multi-node --nodes 2 --gpus-per-node 1 \\
        --launcher accelerate --launcher-arg=--config_file=zero3.yaml \\
        -- python examples/accelerate_zero3.py

Each rank prints ``zero3 rank R/W: stage=3 partitioned=P/T loss A -> B`` (P of the model's T
parameters held on this rank) and the all-reduce line, and ends with ``Accelerator.end_training``
(the process group destroyed before the interpreter exits, as a training script should),
then leaves without interpreter finalization (see the end of this file).
"""

from __future__ import annotations

import os
import sys

from allreduce import check_sum, say


def main() -> int:
    import torch
    from accelerate import Accelerator, PartialState

    torch.manual_seed(0)
    if not torch.cuda.is_available():
        # accelerate finds no backend of its own for DeepSpeed on CPU (it would run each rank
        # alone): name gloo; on GPU nodes it picks nccl itself
        PartialState(backend="gloo")
    acc = Accelerator()
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    total = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(1))
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=8)
    # DeepSpeed takes its micro batch size from the data loader accelerate prepares with it
    model, optimizer, data = acc.prepare(model, optimizer, data)
    plugin = acc.state.deepspeed_plugin
    stage = plugin.zero_stage if plugin is not None else None
    probe_x, probe_y = x[:16], x[:16].sum(dim=1, keepdim=True)   # the same on every rank

    def probe_loss() -> float:
        with torch.no_grad():   # every rank runs it: ZeRO-3 gathers each layer's parameters
            return float(torch.nn.functional.mse_loss(model(probe_x), probe_y).item())

    losses = [probe_loss()]
    for _ in range(3):
        for inputs, target in data:
            loss = torch.nn.functional.mse_loss(model(inputs), target)
            acc.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    losses.append(probe_loss())
    # under ZeRO-3 each rank keeps its partition of every parameter (ds_tensor) and the full
    # parameter is gathered only around forward and backward
    held = sum(p.ds_tensor.numel() for p in model.parameters() if hasattr(p, "ds_tensor"))
    rank, world = acc.process_index, acc.num_processes
    say(f"zero3 rank {rank}/{world}: stage={stage} partitioned={held}/{total} "
        f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    ok = stage == 3 and 0 < held < total and losses[-1] < losses[0]
    code = check_sum(rank, world, also_ok=ok)
    # Leave as a training script should.  ZeRO-3 gathers parameters asynchronously, so gloo's
    # worker threads can still hold work (and its tensors) when the last collective returns;
    # a rank that tears the group down then, or leaves the freeing to interpreter
    # finalization, can abort (SIGABRT, "terminate called without an active exception")
    # after its work is done.  gloo's barrier waits for every collective queued before it,
    # on every rank; then the group is destroyed while the interpreter is still whole.
    acc.wait_for_everyone()
    acc.end_training()
    return code


if __name__ == "__main__":
    # DeepSpeed's engine keeps its own references to the gloo group, so destroying the group
    # does not free it: it is freed at interpreter finalization, where gloo's worker threads
    # can still abort the process (a CI run: rank 1 printed its results, then SIGABRT, and the
    # job was relaunched).  Once every rank has passed the barrier and the output is flushed,
    # the rank leaves without finalization.
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
