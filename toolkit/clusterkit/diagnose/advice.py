"""What each verdict category means in one line, and what to do next (``clusterkit doctor``'s advice)."""

from __future__ import annotations

SUMMARIES = {
    "ok": "the job completed",
    "nccl-network": "NCCL lost its network (InfiniBand/RoCE completion or verbs error)",
    "nccl-timeout": "a collective timed out: some rank stopped taking part",
    "rendezvous": "the launcher could not reach its rendezvous endpoint",
    "port-in-use": "a port the job needs was already held",
    "gpu-oom": "a GPU ran out of memory",
    "host-oom": "the host ran out of memory (or the job went past its --mem)",
    "gpu-hardware": "the GPU or its driver reported a hardware fault (Xid/ECC)",
    "shm": "shared memory (/dev/shm) ran out",
    "slurm-time-limit": "Slurm ended the job at its time limit",
    "slurm-node-failure": "a node of the job failed; Slurm ended the job",
    "slurm-preempted": "Slurm preempted the job",
    "slurm-cancelled": "the job was cancelled",
    "launcher-config": "the launcher refused its configuration",
    "import-env": "the software environment is missing a module or library",
    "filesystem": "a file system failed under the job",
    "user-code": "the training code raised an exception",
    "bad-nodes": "the job's own preflight found too few good nodes; it ended before training",
    "unknown": "no known failure signature",
}

ADVICE = {
    "ok": [],
    "nccl-network": [
        "exclude the node and check its links: clusterkit preflight --nodelist NODE",
        "NCCL_IB_TIMEOUT=22 (site nccl.env) gives a flapping link longer before NCCL gives up",
        "resubmit with --exclude NODE; the requeue budget (--set max_restarts=N) covers transient faults",
    ],
    "nccl-timeout": [
        "look at the rank that is behind: its own log holds the real cause (a hang, a slow disk, a dataloader)",
        "NCCL_DEBUG=INFO (submit --debug) shows which collective each rank reached",
        "the flight recorder's dumps (logs/fr-<job>.r<restart>.rank<N>, read by doctor) name the collective "
        "each rank reached; TORCH_NCCL_ASYNC_ERROR_HANDLING needs no setting (torch's default, 3, ends the ranks)",
    ],
    "rendezvous": [
        "the rendezvous host is the first node of the allocation: check it with clusterkit preflight --nodelist NODE",
        "a node whose store connection timed out (waitForInput) lost its network: check that node's link the same way",
        "a firewall or a wrong NCCL_SOCKET_IFNAME/network.socket_ifname makes the endpoint unreachable",
    ],
    "port-in-use": [
        "another process holds the port (a leftover run?): clusterkit derives ports from the job id; resubmit",
        "check the node for stale launcher processes before reusing it",
    ],
    "gpu-oom": [
        "lower the micro batch: --set micro_batch=N (deepspeed, megatron: in their config, and --set grad_accum=N "
        "keeps the global batch; torchrun, accelerate, srun: passed to the training script as $CK_MICRO_BATCH, "
        "which it must read; horovod, colossalai: the training script chooses it)",
        "clusterkit plan --site SITE --model-params SIZE [--launcher L] recommends a setup and node count that fit",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps when memory is fragmented",
    ],
    "host-oom": [
        "the job went past its host memory: raise the site's scheduler.sbatch mem, or use fewer dataloader workers",
        "with deepspeed or accelerate, --set offload=none keeps optimizer state out of host memory",
    ],
    "gpu-hardware": [
        "exclude the node and report it to the admins: clusterkit preflight --nodelist NODE, "
        "then submit --exclude NODE",
        "the requeue budget (--set max_restarts=N) lets Slurm restart the job elsewhere",
    ],
    "shm": [
        "containers need a large /dev/shm; NCCL and dataloader workers both use it",
        "fewer dataloader workers, or NCCL_SHM_DISABLE=1 only to confirm the diagnosis",
    ],
    "slurm-time-limit": [
        "raise --set time=HH:MM:SS, or checkpoint more often and let the job requeue",
    ],
    "slurm-node-failure": [
        "exclude the node: clusterkit preflight --nodelist NODE, then submit --exclude NODE",
        "a requeue budget (--set max_restarts=N) lets Slurm restart the job on healthy nodes",
    ],
    "slurm-preempted": [
        "the job was preempted by a higher-priority job; a requeue budget (--set max_restarts=N) resumes it",
    ],
    "slurm-cancelled": [
        "someone (or something) ran scancel; `clusterkit status` shows who Slurm says did",
    ],
    "launcher-config": [
        "re-render with clusterkit render and compare; check --set values against the launcher's rules",
    ],
    "import-env": [
        "the environment differs between nodes: clusterkit preflight --nodelist NODE, and the site's software.modules",
        "containers (software.container) give every node the same environment",
    ],
    "filesystem": [
        "check the mount on that node: clusterkit preflight --nodelist NODE (storage checks); exclude it if it is bad",
    ],
    "user-code": [
        "fix the exception in the training code; the evidence shows the traceback's last line",
    ],
    "bad-nodes": [
        "resubmit without them: clusterkit submit --exclude-from JOB ... (the job's result line has the command)",
        "or allocate spares that take their place: submit --spares K",
        "report the nodes to the admins; clusterkit preflight --nodelist NODES shows each check",
    ],
    "unknown": [
        "read the evidence and the logs: clusterkit logs JOB",
    ],
}


def advice(category: str, launcher: str | None = None) -> list[str]:
    """The advice for ``category``, in words the job's ``launcher`` takes: every ``--set`` named
    is one that launcher accepts (unknown launcher, as with ``doctor --logs``: the general form)."""
    lines = list(ADVICE[category])
    if launcher is None or category not in ("gpu-oom", "host-oom"):
        return lines
    from clusterkit.job.settings import script_variable, used_by

    if category == "host-oom":
        return lines if launcher in used_by("offload") else lines[:1]
    if launcher in used_by("grad_accum"):  # the launcher acts on the batch math itself
        batch = "lower --set micro_batch=N (raise --set grad_accum=N to keep the global batch)"
    elif (variable := script_variable("micro_batch", launcher)) is not None and launcher in used_by("micro_batch"):
        batch = (f"lower the micro batch: --set micro_batch=N passes it to the training script as ${variable} "
                 f"({launcher} does not act on it: the script must read it), or lower it in the script")
    else:
        batch = (f"lower the micro batch in the training script: {launcher} leaves the batch to it "
                 "(no --set reaches it)")
    return [batch, f"clusterkit plan --site SITE --model-params SIZE --launcher {launcher} recommends a setup "
                   "and node count that fit", lines[2]]
