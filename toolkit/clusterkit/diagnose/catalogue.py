"""The failure catalogue: categories, the lines that betray them, and what to do next.

Category names are a JSON contract (``clusterkit doctor --json``).  Cascade kinds name the
symptoms that ranks show when *another* rank failed (they wait, time out, lose their peer, are
killed); they are counted under a verdict, never reported as its cause.

Every signature is written in the common subset of Python's ``re`` and RE2, so that the
reader can fold them all into one pattern and scan gigabytes with RE2 where it is installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CATEGORIES = (
    "ok", "nccl-network", "nccl-timeout", "rendezvous", "port-in-use", "gpu-oom", "host-oom",
    "gpu-hardware", "shm", "slurm-time-limit", "slurm-node-failure", "slurm-preempted",
    "slurm-cancelled", "launcher-config", "import-env", "filesystem", "user-code", "unknown",
)
CASCADE_KINDS = ("nccl-timeout", "connection-reset", "child-failed", "peer-killed", "srun-terminated",
                 "exit-barrier")
SLURM_CATEGORIES = frozenset({"slurm-time-limit", "slurm-node-failure", "slurm-preempted", "slurm-cancelled"})


@dataclass(frozen=True)
class Signature:
    """One way a category shows in a log line (``cascade``: the kind of symptom, if it is one)."""

    category: str
    pattern: str
    cascade: str | None = None
    slurm: bool = False   # printed by Slurm itself (slurmstepd): a Slurm fact, ranked first


def _sig(category: str, *patterns: str, cascade: str | None = None, slurm: bool = False) -> list[Signature]:
    return [Signature(category, p, cascade, slurm) for p in patterns]


# Order matters: the first signature a line matches decides its category.
SIGNATURES: tuple[Signature, ...] = tuple(
    # slurmstepd's own words (src/slurmd/slurmstepd/req.c and the jobacct_gather plugin)
    _sig("slurm-time-limit", r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO TIME LIMIT", slurm=True)
    + _sig("slurm-preempted", r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO PREEMPTION", slurm=True)
    + _sig("slurm-node-failure", r"srun: error: Node failure on \S+",
           r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO NODE FAIL", slurm=True)
    + _sig("host-oom", r"[Ee]xceeded (?:job |step )?memory limit", r"Detected \d+ oom[-_]kill event",
           r"StepId=\S+ exceeded memory", slurm=True)
    + _sig("slurm-cancelled", r"\*\*\* JOB \S+ ON \S+ CANCELLED AT \S+", slurm=True)
    # the driver and the hardware
    + _sig("gpu-hardware", r"NVRM: Xid", r"\bXid \(PCI:", r"[Uu]ncorrectable ECC", r"ECC_UNCORRECTABLE",
           r"GPU has fallen off the bus", r"[Dd]ouble[- ]bit ECC", r"ECC page retirement",
           r"cudaErrorECCUncorrectable", r"NVLink.* (?:fatal|[Ee]rror)")
    + _sig("gpu-oom", r"CUDA out of memory", r"OutOfMemoryError", r"CUDA error: out of memory",
           r"cudaErrorMemoryAllocation", r"Cuda failure 'out of memory'", r"CUBLAS_STATUS_ALLOC_FAILED")
    + _sig("host-oom", r"Out of memory: Killed process", r"oom-kill", r"\bMemoryError\b",
           r"Cannot allocate memory", r"std::bad_alloc")
    + _sig("shm", r"/dev/shm", r"\bBus error\b", r"unable to mmap \d+ bytes from file </torch_",
           r"insufficient shared memory", r"shm_open")
    + _sig("filesystem", r"Stale file handle", r"ESTALE", r"\[Errno 116\]", r"Input/output error",
           r"Disk quota exceeded", r"No space left on device", r"Read-only file system",
           r"Transport endpoint is not connected")
    + _sig("import-env", r"ModuleNotFoundError", r"No module named", r"\bImportError\b", r"command not found",
           r"cannot open shared object file", r"GLIBC_[0-9.]+' not found", r"clusterkit: module load .* failed",
           r"execve\(\): \S+: No such file or directory")
    + _sig("port-in-use", r"Address already in use", r"EADDRINUSE", r"errno: 98\b")
    + _sig("nccl-network", r"NET/IB ?: ?Got completion from peer", r"NCCL WARN Call to ibv_\w+ failed",
           r"transport retry counter exceeded", r"IBV_WC_RETRY_EXC_ERR", r"NCCL WARN NET/IB.* (?:failed|error)",
           r"local catastrophic error")
    + _sig("launcher-config", r"(?:torchrun|deepspeed|accelerate|launch\.py): error:", r"error: unrecognized arguments",
           r"error: argument --", r"train_batch_size is not equal to", r"Check batch related parameters",
           r"srun: error: Unable to create step", r"not divisible by", r"Invalid rendezvous")
    # cascade symptoms: ranks that were only waiting for the one that failed
    + _sig("nccl-timeout", r"Watchdog caught collective operation timeout",
           r"ran for \d+ milliseconds before timing out",
           r"NCCL communicator was aborted", r"Some NCCL operations have failed or timed out",
           r"Timed out waiting \d+ms for \w+ operation", cascade="nccl-timeout")
    + _sig("nccl-timeout", r"Connection reset by peer", r"Connection closed by (?:remote )?peer", r"Broken pipe",
           r"remote worker crashing", r"remote process exited", r"Connection was likely closed",
           r"Failed to recv, got 0 bytes", cascade="connection-reset")
    + _sig("nccl-timeout", r"Error waiting on exit barrier", r"exit_barrier", cascade="exit-barrier")
    + _sig("nccl-timeout", r"ChildFailedError", r"RendezvousClosedError", r"failed to shutdown the rendezvous",
           cascade="child-failed")
    + _sig("nccl-timeout", r"Signal 15 \(SIGTERM\) received by PID", r"got signal: 15",
           r"closing signal SIGTERM", cascade="peer-killed")
    + _sig("nccl-timeout", r"srun: error: \S+: tasks? [0-9,-]+: Terminated", r"srun: forcing job termination",
           r"srun: Job step aborted", r"\*\*\* STEP \S+ ON \S+ CANCELLED AT",
           r"srun: error: Timed out waiting for job step",
           cascade="srun-terminated")
    # rendezvous after the cascades: a closed rendezvous is another agent giving up
    + _sig("rendezvous", r"RendezvousConnectionError", r"RendezvousTimeoutError",
           r"The client socket has (?:timed out|failed to connect)", r"connection to the C10d store has failed",
           r"DistStoreError")
    # an exception no one above claims: the training code's own
    + _sig("user-code", r"(?:Error|Exception)(?::|$)")
)

# torchrun's failure summary: the first failure its agent saw on one node.
ROOT_CAUSE = "Root Cause (first observed failure):"
# srun's account of a task that ended badly; rank = task id when srun launched one task per GPU
SRUN_TASK_EXIT = r"srun: error: \S+: tasks? [0-9,-]+: Exited with exit code"
# clusterkit's own batch-log marker: one per (re)start of the job script
RESTART_MARK = r"clusterkit: job \d+ on \S+ \(restart \d+ of at most \d+\)"
# the job script stamps its own lines with the time (UTC, HH:MM:SS) since it logs signals
SUCCESS_MARK = r"clusterkit: (?:\d\d:\d\d:\d\d )?launcher exited with status 0\b"
_SUCCESS = re.compile(SUCCESS_MARK)

_EXC_LINE = re.compile(r"^\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::|\s*$)")
COMPILED = tuple((s, re.compile(s.pattern)) for s in SIGNATURES)


def trigger_pattern() -> str:
    """One alternation of every signature and marker: a line matching none of it is noise."""
    parts = [s.pattern for s in SIGNATURES] + [re.escape(ROOT_CAUSE), SRUN_TASK_EXIT, RESTART_MARK,
                                              SUCCESS_MARK, r"SeqNum=\d+"]
    return "|".join(f"(?:{p})" for p in parts)


def is_success(line: str) -> bool:
    """The job script's own line for a launcher that exited 0."""
    return _SUCCESS.search(line.rstrip("\r\n")) is not None


def classify(message: str) -> Signature | None:
    """The first signature ``message`` (a line without its rank prefix) matches, if any.

    The generic ``user-code`` signature needs the line to read as a Python exception line
    (``ValueError: ...``, ``torch.OutOfMemoryError: ...``), not just to mention "Error".
    """
    for sig, rx in COMPILED:
        if rx.search(message):
            if sig.category == "user-code" and not _EXC_LINE.match(message):
                continue
            return sig
    return None


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
    "unknown": "no known failure signature",
}

ADVICE = {
    "ok": [],
    "nccl-network": [
        "exclude the node and check its links: clusterkit preflight --nodes NODE",
        "NCCL_IB_TIMEOUT=22 (site nccl.env) gives a flapping link longer before NCCL gives up",
        "resubmit with --exclude NODE; the requeue budget (--set max_restarts=N) covers transient faults",
    ],
    "nccl-timeout": [
        "look at the rank that is behind: its own log holds the real cause (a hang, a slow disk, a dataloader)",
        "NCCL_DEBUG=INFO (submit --debug) shows which collective each rank reached",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 turns a silent hang into this error instead of waiting forever",
    ],
    "rendezvous": [
        "the rendezvous host is the first node of the allocation: check it with clusterkit preflight --nodes NODE",
        "a firewall or a wrong NCCL_SOCKET_IFNAME/network.socket_ifname makes the endpoint unreachable",
    ],
    "port-in-use": [
        "another process holds the port (a leftover run?): clusterkit derives ports from the job id; resubmit",
        "check the node for stale launcher processes before reusing it",
    ],
    "gpu-oom": [
        "lower --set micro_batch=N (raise --set grad_accum to keep the global batch)",
        "clusterkit plan --model-params SIZE recommends a ZeRO stage and node count that fit",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps when memory is fragmented",
    ],
    "host-oom": [
        "the job went past its host memory: raise the site's scheduler.sbatch mem, or use fewer dataloader workers",
        "--set offload=none keeps DeepSpeed from staging optimizer state in host memory",
    ],
    "gpu-hardware": [
        "exclude the node and report it to the admins: clusterkit preflight --nodes NODE, then submit --exclude NODE",
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
        "exclude the node: clusterkit preflight --nodes NODE, then submit --exclude NODE",
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
        "the environment differs between nodes: clusterkit preflight --nodes NODE, and the site's software.modules",
        "containers (software.container) give every node the same environment",
    ],
    "filesystem": [
        "check the mount on that node: clusterkit preflight --nodes NODE (storage checks); exclude it if it is bad",
    ],
    "user-code": [
        "fix the exception in the training code; the evidence shows the traceback's last line",
    ],
    "unknown": [
        "read the evidence and the logs: clusterkit logs JOB",
    ],
}
