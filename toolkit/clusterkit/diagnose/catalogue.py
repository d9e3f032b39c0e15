"""The failure catalogue: categories, the lines that betray them, and what to do next.

Category names are a JSON contract (``clusterkit doctor --json``).  Cascade kinds name the
symptoms that ranks show when *another* rank failed (they wait, time out, lose their peer, are
killed); they are counted under a verdict, never reported as its cause.

A signature is a family of lines (several patterns that say the same thing in different tools'
words), never a rule for one log: each carries one real line of the family and the public
thread it was posted in, and a test checks that the line is claimed by its own family.  The
real logs doctor is scored on are in ``tests/diagnose/corpus/``.

Every pattern is written in the common subset of Python's ``re`` and RE2, so that the reader
can fold them all into one pattern and scan gigabytes with RE2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusterkit.diagnose.advice import ADVICE as ADVICE  # re-exported
from clusterkit.diagnose.advice import SUMMARIES as SUMMARIES
from clusterkit.diagnose.advice import advice as advice
from clusterkit.diagnose.marks import CLEAN_EXIT, PROMPT, is_own_notice

CATEGORIES = (
    "ok", "nccl-network", "nccl-timeout", "rendezvous", "port-in-use", "gpu-oom", "host-oom",
    "gpu-hardware", "shm", "slurm-time-limit", "slurm-node-failure", "slurm-preempted",
    "slurm-cancelled", "launcher-config", "import-env", "filesystem", "user-code", "bad-nodes", "unknown",
)
CASCADE_KINDS = ("nccl-timeout", "connection-reset", "child-failed", "peer-killed", "srun-terminated",
                 "exit-barrier")
# Failures a restart of the same job cannot fix: a chain stops at them (clusterkit.chain).
NOT_FIXED_BY_RESTART = ("user-code", "launcher-config", "import-env")
SLURM_CATEGORIES = frozenset({"slurm-time-limit", "slurm-node-failure", "slurm-preempted", "slurm-cancelled"})


@dataclass(frozen=True)
class Signature:
    """A family of log lines that betray one category (``cascade``: the kind of symptom, if it is
    one), with one real line of the family and where it was seen."""

    category: str
    name: str
    patterns: tuple[str, ...]
    example: str
    source: str
    cascade: str | None = None
    slurm: bool = False   # printed by Slurm itself (slurmstepd): a Slurm fact, ranked first

    @property
    def pattern(self) -> str:
        return "|".join(f"(?:{p})" for p in self.patterns)


def _fam(category: str, name: str, example: str, source: str, *patterns: str, cascade: str | None = None,
         slurm: bool = False) -> Signature:
    return Signature(category, name, patterns, example, source, cascade, slurm)


_GENERIC = r"(?:Error|Exception)(?::|$)"
# c10d's store client waited for an answer that never came: the store's host is up (it would
# close the connection when its process ends) but unreachable from this node
STORE_TIMEOUT = r"\[c10d\] waitForInput: socket\b.{0,300}\btimed out after \d+ms"
_STORE_TIMEOUT = re.compile(STORE_TIMEOUT)


def is_store_timeout(text: str) -> bool:
    return _STORE_TIMEOUT.search(text) is not None

# Order matters: the first family a line matches decides its category.  Sources are GitHub
# issues and pull requests (owner/repo#N), where the example line was posted; none is a log of
# the corpus's held-out quarter.
SIGNATURES: tuple[Signature, ...] = (
    # slurmstepd's and srun's own words: Slurm facts
    _fam("slurm-time-limit", "Slurm ended the job or step at its time limit",
         "slurmstepd: error: *** JOB 13055114 ON compute-h-17-51 CANCELLED AT 2020-07-11T22:48:26 DUE TO TIME "
         "LIMIT ***", "labsyspharm/mcmicro#163",
         r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO TIME LIMIT", slurm=True),
    _fam("slurm-preempted", "Slurm preempted the job",
         "slurmstepd: error: *** JOB 32391783 ON cn119 CANCELLED AT 2021-06-18T13:05:36 DUE TO PREEMPTION ***",
         "SystemsGenetics/GEMmaker#242",
         r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO PREEMPTION", slurm=True),
    _fam("slurm-node-failure", "Slurm lost a node of the job",
         "salloc: error: Node failure on worker-1", "nebius/soperator#854",
         r"(?:srun|salloc|sbatch): error: Node failure on \S+",
         r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+ DUE TO NODE FAIL", slurm=True),
    _fam("host-oom", "Slurm's cgroup saw the job or step go past its memory",
         "slurmstepd: error: Detected 2 oom-kill event(s) in step 3756240.batch cgroup.", "lanl/PyBNF#118",
         r"[Ee]xceeded (?:job |step )?memory limit", r"Detected \d+ oom[-_]kill event", r"StepId=\S+ exceeded memory",
         r"srun: error: \S+: tasks? [0-9,-]+: Out Of Memory", slurm=True),
    _fam("slurm-cancelled", "someone cancelled the job",
         "slurmstepd: error: *** JOB 3 ON c1 CANCELLED AT 2025-02-13T15:47:35 ***", "qiskit-community/spank-plugins#17",
         r"\*\*\* JOB \S+ ON \S+ CANCELLED AT \S+", slurm=True),
    # the driver and the hardware
    _fam("gpu-hardware", "the NVIDIA driver reports a GPU fault: an Xid, an uncorrectable ECC error, NVLink",
         "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
         "NVIDIA/open-gpu-kernel-modules#1150",
         r"NVRM: Xid", r"\bXid \(PCI:", r"NVLink.* (?:fatal|[Ee]rror)",
         r"[Uu]ncorrectable ECC", r"ECC_UNCORRECTABLE", r"[Dd]ouble[- ]bit ECC", r"ECC page retirement",
         r"cudaErrorECCUncorrectable"),
    _fam("gpu-hardware", "the GPU is gone (fell off the bus, lost to NVML)",
         "Unable to determine the device handle for GPU 0000:81:00.0: Unknown Error", "limbo0000/InstanceLoc#20",
         r"fallen off the bus", r"Unable to determine the device handle for GPU", r"GPU is lost"),
    _fam("gpu-hardware", "the driver cannot bring the GPU up",
         "[ 1097.650222] NVRM: GPU 0000:04:01.0: RmInitAdapter failed! (0x11:0x45:2525)", "NVIDIA/gpu-operator#649",
         r"RmInitAdapter failed", r"rm_init_adapter failed", r"NVRM: .*(?:[Ff]ailed|NV_ERR_)"),
    _fam("gpu-hardware", "a fatal PCIe error (AER) on the GPU's link",
         "[  +0.000004] pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction "
         "Layer, (Requester ID)", "rwth-i6/returnn#1500",
         r"PCIe Bus Error: severity=Uncorrected", r"AER: .*Uncorrect(?:ed|able) \(Fatal\)"),
    # A fatal CUDA error that the program cannot cause: the driver lost the device (cudaErrorUnknown
    # follows Xid 79 "fallen off the bus", Xid 48/74 and the like; NVIDIA's Xid catalogue), or an
    # uncorrectable memory/NVLink fault.  Illegal addresses and instructions are the program's own
    # (Xid 13/31: "user application fault"): the family "a CUDA kernel faulted" below.
    # cudaErrorUnknown is counted as the device's: projects that retry on other GPUs list it with
    # the fell-off-the-bus errors (proteneer/timemachine#1203), and PyTorch's maintainers read it as
    # "the driver ... or the GPU is bad" (torch/cutorch#197).  Not always: the example's own thread
    # (on WSL) ended at a memory setting: there a relaunch without the node fails again, and the
    # relaunch and restart budgets (max_relaunches, max_restarts) end the run.
    _fam("gpu-hardware", "a fatal CUDA error that comes from the device, not the program",
         "[rank0]: RuntimeError: CUDA error: unknown error", "liunian-Jay/MU-GOT#7",
         r"CUDA error: unknown error", r"CUDA_ERROR_UNKNOWN\b", r"cudaErrorUnknown\b",
         r"uncorrectable NVLink error", r"CUDA_ERROR_NVLINK_UNCORRECTABLE", r"CUDA error: GPU is lost"),
    # a CUDA kernel faulted on a bad address or instruction: the program's (or a library's) bug,
    # in whatever thread saw it first (NCCL's watchdog reports another stream's fault)
    _fam("user-code", "a CUDA kernel faulted (illegal address or instruction): a software bug",
         "[E ProcessGroupNCCL.cpp:916] [Rank 0] NCCL watchdog thread terminated with exception: CUDA error: an "
         "illegal memory access was encountered", "vllm-project/vllm#4108",
         r"an illegal memory access was encountered", r"CUDA error: misaligned address",
         r"an illegal instruction was encountered", r"CUDA_ERROR_ILLEGAL_(?:ADDRESS|INSTRUCTION)",
         r"cudaErrorIllegal(?:Address|Instruction)"),
    _fam("gpu-oom", "the CUDA allocator ran out of GPU memory",
         "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 55.57 GiB. GPU 0 has a total capacty "
         "of 12.00 GiB of which 9.02 GiB is free. Of the allocated memory 984.52 MiB is allocated by PyTorch, and "
         "463.48 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
         "setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and "
         "PYTORCH_CUDA_ALLOC_CONF", "wxian3/NeuroLens#2",
         r"CUDA out of memory", r"OutOfMemoryError", r"CUDA error: out of memory", r"cudaErrorMemoryAllocation",
         r"Cuda failure 'out of memory'", r"CUBLAS_STATUS_ALLOC_FAILED"),
    # host memory
    _fam("host-oom", "the kernel's or a memory cgroup's OOM killer",
         "Memory cgroup out of memory: Killed process 629 (onmt_train) total-vm:14119556kB, anon-rss:6538204kB, "
         "file-rss:80652kB, shmem-rss:16kB, UID:0 pgtables:13432kB oom_score_adj:0", "ymoslem/OpenNMT-Tutorial#6",
         r"[Oo]ut of memory: Kill(?:ed)? process", r"oom-kill"),
    _fam("host-oom", "host memory allocation failed",
         "terminate called after throwing an instance of 'std::bad_alloc'", "ljanyst/ssd-tensorflow#8",
         r"\bMemoryError\b", r"Cannot allocate memory", r"std::bad_alloc", r"memory allocation of \d+ bytes failed"),
    _fam("host-oom", "a worker killed by SIGKILL (-9, 137, Killed) with nothing else to explain it",
         "  traceback : Signal 9 (SIGKILL) received by PID 14750", "lzhxmu/CPPO#6",
         r"failed \(exitcode: -9\)", r"exits with return code = -9", r"[Ss]ignal 9 \(SIGKILL\) received",
         r"is killed by signal: Killed", r"line \d+: +\d+ Killed ", r"^Killed$", r"exited on signal 9 \(Killed\)",
         r"(?:exit|return) (?:code|status)[ =:]*137\b"),
    _fam("shm", "shared memory ran out (Bus error, SIGBUS, /dev/shm, torch's shm files)",
         "RuntimeError: DataLoader worker (pid 46794) is killed by signal: Bus error. It is possible that "
         "dataloader's workers are out of shared memory. Please try to raise your shared memory limit.",
         "hkchengrex/STCN#132",
         r"/dev/shm", r"\b[Bb]us error\b", r"unable to mmap \d+ bytes from file </torch_",
         r"unable to write to file </torch_", r"insufficient shared memory", r"shm_open",
         r"failed \(exitcode: -7\)", r"exits with return code = -7", r"[Ss]ignal 7 \(SIGBUS\) received"),
    # file systems
    _fam("filesystem", "a network file system went away under an open file",
         "OSError: [Errno 116] Stale file handle", "nanoporetech/taiyaki#66",
         r"Stale file handle", r"ESTALE", r"\[Errno 116\]", r"Input/output error",
         r"Transport endpoint is not connected"),
    _fam("filesystem", "no room to write: full, over quota, read-only",
         "OSError: [Errno 122] Disk quota exceeded: 'out/intermediate.ntw'", "KennthShang/HostG#7",
         r"Disk quota exceeded", r"No space left on device", r"Read-only file system"),
    _fam("filesystem", "torch.save could not write the checkpoint",
         "[rank0]: RuntimeError: [enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing "
         "file data.pkl: file write failed", "SWivid/F5-TTS#458",
         r"PytorchStreamWriter failed writing"),
    _fam("filesystem", "the Lustre client lost its servers",
         "[Mon Oct 16 10:06:17 2017] LustreError: 11-0: jmain01-MDT0000-mdc-ffff88203810d800: operation obd_ping "
         "to node 172.31.126.88@o2ib failed: rc = -107", "jade-hpc-gpu/jade-hpc-gpu.github.io#14",
         r"LustreError: ", r"Lustre: .*(?:[Ff]ailed|evicted|was lost)"),
    _fam("filesystem", "the kernel reports tasks hung on I/O (a network file system that stopped answering)",
         "[ 3223.539141] nfs: server ease not responding, still trying", "raspberrypi/linux#2482",
         r"INFO: task \S+ blocked for more than \d+ seconds", r"nfs: server \S+ not responding",
         r"hung_task_timeout_secs"),
    # the software environment
    _fam("import-env", "a Python import failed",
         "ImportError: libcudart.so.8.0: cannot open shared object file: No such file or directory",
         "pengzhou1108/RGB-N#21",
         r"ModuleNotFoundError", r"No module named", r"\bImportError\b"),
    _fam("import-env", "a program or library is missing on the node",
         "slurmstepd: error: execve(): ml: No such file or directory", "envmodules/modules#341",
         r"command not found", r"cannot open shared object file", r"GLIBC_[0-9.]+' not found",
         r"clusterkit: module load .* failed", r"execve\(\): \S+: No such file or directory"),
    _fam("import-env", "the container did not start (pyxis/enroot, Apptainer/Singularity)",
         "slurmstepd: error: pyxis: couldn't start container", "NVIDIA/pyxis#61",
         r"pyxis: (?:couldn't start container|failed to import docker image|container start failed)",
         r"enroot-(?:switchroot|nsenter|mount): (?:failed|error)", r"\[ERROR\] .*enroot",
         r"FATAL: +(?:container creation failed|While checking container encryption|could not open image)",
         r"container creation failed: "),
    _fam("port-in-use", "a port the job binds was taken",
         "[W socket.cpp:426] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already "
         "in use).", "meta-llama/llama-cookbook#186",
         r"Address already in use", r"EADDRINUSE", r"errno: 98\b"),
    # fabrics
    _fam("nccl-network", "InfiniBand/RoCE verbs or completions failed",
         "[ast1815:6807 :0:6807] ib_mlx5_log.c:115  FATAL: Error on mlx5_3:1 QP 0xe6d7 wqe[7821]: Transport retry "
         "count exceeded (synd 0x15 vend 0x81) opcode SEND", "openucx/ucx#2973",
         r"NET/IB ?: ?Got completion from peer", r"NCCL WARN Call to ibv_\w+ failed",
         r"[Tt]ransport retry count(?:er)? exceeded", r"IBV_WC_RETRY_EXC_ERR", r"NCCL WARN NET/IB.* (?:failed|error)",
         r"local catastrophic error"),
    _fam("nccl-network", "libfabric/OFI (EFA) reported an error",
         "[1,13]<stdout>:nccl-tests-worker-1:35:89 [5] ofi_process_cq:1039 NCCL WARN NET/OFI Request 0x7fbb944701b8 "
         "completed with error. RC: 20. Error: unknown error. Completed length: 0, Request: { buffer_index: 255, "
         "dev: 1, size: 0, state: CREATED, direction: SEND }", "aws/aws-ofi-nccl#156",
         r"WARN\b.*NET/OFI"),
    _fam("nccl-network", "NCCL's socket transport failed",
         "user:16901:16967 [2] misc/socket.cc:441 NCCL WARN socketFinalizeAccept: wrong type 4 != 3",
         "NVIDIA/nccl-tests#188",
         r"NCCL WARN socketFinalizeAccept", r"NCCL WARN NET/Socket"),
    _fam("nccl-network", "NCCL gave up on a system call or a remote peer (its sockets, its network)",
         "NCCL error in: /torch/lib/c10d/ProcessGroupNCCL.cpp:260, unhandled system error", "NVIDIA/nccl#207",
         r"NCCL error.*unhandled system error", r"ncclSystemError"),
    _fam("nccl-network", "older NCCL could not connect its sockets",
         "tj1-asr-train-v100-13:941227:943077 [0] include/socket.h:390 NCCL WARN Connect to 10.38.10.112<21724> "
         "failed : Connection refused", "espnet/espnet#1940",
         r"NCCL WARN Connect to \S+ failed", r"WARN Call to connect failed",
         r"NCCL WARN socketStartConnect: Connect to"),
    # gloo resolves the host's own name to find its address: a loopback address there is the
    # node's name resolution (/etc/hosts), fixed with GLOO_SOCKET_IFNAME, not by a retry
    _fam("launcher-config", "gloo connects to a loopback address (the hostname resolves to 127.x)",
         "RuntimeError: [/opt/conda/conda-bld/pytorch_1607370120218/work/third_party/gloo/gloo/transport/tcp/pair.cc:"
         "769] connect [127.0.1.1]:3496: Connection refused", "Megvii-BaseDetection/YOLOX#1167",
         r"gloo/transport/tcp/pair\.cc:\d+\] connect \[(?:127\.|::1\])"),
    _fam("rendezvous", "gloo could not connect to a peer",
         "RuntimeError: [/opt/conda/conda-bld/pytorch_1682343967769/work/third_party/gloo/gloo/transport/tcp/"
         "pair.cc:799] connect [172.31.71.170]:13195: Connection refused", "pytorch/pytorch#108732",
         r"gloo/transport/tcp/pair\.cc:\d+\] connect \[\S+\]:\d+: Connection refused"),
    _fam("launcher-config", "the launcher cannot start its ranks over ssh (DeepSpeed's check, Open MPI's orted)",
         "RuntimeError: Using hostfile at /etc/hostfile but host=ft-67ea02bd700cbb7-main-0.ft-67ea02bd700cbb7 was not "
         "reachable via ssh. If you are running with a single node please remove /etc/hostfile or setup passwordless "
         "ssh.", "volcano-sh/volcano#2952",
         r"was not reachable via ssh", r"Command 'ssh (?:-o \S+ )*\S+ hostname' returned non-zero exit status",
         r"ssh: connect to host \S+ port \d+: Connection refused",
         r"Permission denied \(publickey", r"Host key verification failed",
         r"ORTE was unable to reliably start one or more daemons", r"PRTE has lost communication with a remote daemon"),
    _fam("rendezvous", "a host of the job did not resolve when the launcher started",
         "ssh: Could not resolve hostname lm-horovod-job-worker-5.lm-horovod-job: Name or service not known",
         "volcano-sh/volcano#2226",
         r"ssh: Could not resolve hostname"),
    # configuration
    _fam("launcher-config", "the launcher or the script refused its arguments",
         "main.py: error: unrecognized arguments: --local-rank=0", "skycrapers/TecoGAN-PyTorch#31",
         r"(?:torchrun|deepspeed|accelerate|launch\.py): error:", r"error: unrecognized arguments",
         r"error: argument --"),
    _fam("launcher-config", "the batch settings do not add up (DeepSpeed's checks)",
         "[rank0]: AssertionError: Check batch related parameters. train_batch_size is not equal to "
         "micro_batch_per_gpu * gradient_acc_step * world_size 8 != 2 * 1 * 1 ", "deepspeedai/DeepSpeed#6914",
         r"train_batch_size is not equal to", r"Check batch related parameters",
         r"(?:[Bb]atch size|accumulation steps)(?: per gpu)?: -?\d+ has to be greater than 0", r"not divisible by"),
    _fam("launcher-config", "Slurm or the rendezvous cannot place what was asked",
         "srun: error: Unable to create step for job 17627941: Requested node configuration is not available",
         "DragonHPC/dragon#61",
         r"srun: error: Unable to create step", r"Invalid rendezvous"),
    _fam("launcher-config", "NCCL was called with ranks or devices that do not fit",
         "RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/../c10d/NCCLUtils.hpp:82, invalid argument, NCCL "
         "version 2.4.8", "facebookresearch/ParlAI#3084",
         r"NCCL error.*invalid argument", r"ncclInvalidArgument", r"ncclInvalidUsage"),
    # the training code's own checks
    _fam("user-code", "a CUDA device-side assert (the assert text says which)",
         "/pytorch/aten/src/THCUNN/ClassNLLCriterion.cu:108: cunn_ClassNLLCriterion_updateOutput_kernel: block: "
         "[0,0,0], thread: [0,0,0] Assertion `t >= 0 && t < n_classes` failed.",
         "layumi/Person_reID_baseline_pytorch#372",
         r"Assertion `[^`]*` failed", r"device-side assert triggered"),
    _fam("user-code", "the loss became NaN or infinite",
         "FloatingPointError: Loss became infinite or NaN at iteration=0!", "gist-ailab/uoais#16",
         r"Loss became infinite or NaN", r"non-finite loss", r"FloatingPointError"),
    # cascade symptoms: ranks that were only waiting for the one that failed
    _fam("nccl-timeout", "a collective timed out (torch's NCCL watchdog)",
         "[rank6]:[E1206 18:44:16.997991020 ProcessGroupNCCL.cpp:1515] [PG 1 Rank 6] Process group watchdog thread "
         "terminated with exception: [Rank 6] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7753, "
         "OpType=_REDUCE_SCATTER_BASE, NumelIn=544997376, NumelOut=68124672, Timeout(ms)=600000) ran for 600003 "
         "milliseconds before timing out.", "hiyouga/LlamaFactory#6269",
         r"Watchdog caught collective operation timeout", r"ran for \d+ milliseconds before timing out",
         r"watchdog got stuck for \d+ seconds", r"NCCL communicator was aborted",
         r"Some NCCL operations have failed or timed out", r"Timed out waiting \d+ms for \w+ operation",
         cascade="nccl-timeout"),
    _fam("nccl-timeout", "a peer closed the connection",
         "gpu004:2200689:2200706 [3] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
         "gpu004.ds-a4-r02.abc.com<55693>", "NVIDIA/nccl-tests#166",
         r"Connection reset by peer", r"Connection closed by (?:remote )?peer", r"Broken pipe",
         r"remote worker crashing", r"remote process exited", r"Connection was likely closed",
         r"Failed to recv, got 0 bytes", cascade="connection-reset"),
    _fam("nccl-timeout", "torchrun's agents waited for each other at exit",
         "2023-03-09T10:53:23.670-05:00\tERROR:torch.distributed.elastic.agent.server.api:Error waiting on exit "
         "barrier. Elapsed: 315.7792458534241 seconds", "pytorch/pytorch#69520",
         r"Error waiting on exit barrier", r"exit_barrier", cascade="exit-barrier"),
    _fam("nccl-timeout", "torchrun reports that a child failed",
         "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "lmzpai/roboMamba#10",
         r"ChildFailedError", r"RendezvousClosedError", r"failed to shutdown the rendezvous", cascade="child-failed"),
    _fam("nccl-timeout", "the launcher stopped the other workers",
         "[2024-05-28 14:04:27,954] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 60552 "
         "closing signal SIGTERM", "THU-MIG/RepViT#65",
         r"Signal 15 \(SIGTERM\) received by PID", r"got signal: 15", r"closing signal SIGTERM", cascade="peer-killed"),
    _fam("nccl-timeout", "srun ended the step's other tasks",
         "srun: error: nid01934: tasks 2,4-5,7: Terminated", "desihub/desitarget#628",
         r"srun: error: \S+: tasks? [0-9,-]+: Terminated", r"srun: forcing job termination", r"srun: Job step aborted",
         r"\*\*\* STEP \S+ ON \S+ CANCELLED AT", r"srun: error: Timed out waiting for job step",
         cascade="srun-terminated"),
    # rendezvous after the cascades: a closed rendezvous is another agent giving up
    _fam("rendezvous", "the rendezvous store stopped answering (the network to it, not its host ending)",
         "[rank1]:[W623 15:37:01.824135523 socket.cpp:485] [c10d] waitForInput: socket SocketImpl(fd=100, "
         "addr=[node-0.company.net]:43590, remote=[node-0.company.net]:20000) timed out after 1800000ms",
         "sgl-project/sglang#7478",
         STORE_TIMEOUT),
    _fam("rendezvous", "the launcher could not reach its rendezvous store",
         "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has "
         "failed. See inner exception for details.", "pytorch/pytorch#107021",
         r"RendezvousConnectionError", r"RendezvousTimeoutError",
         r"The client socket has (?:timed out|failed to connect)", r"connection to the C10d store has failed",
         r"DistStoreError"),
    # an exception no one above claims: the training code's own
    _fam("user-code", "the training code raised an exception",
         "RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors while waiting for "
         "send/recv from rank 0. Please check rank 0 logs for faulty rank.", "pytorch/pytorch#76198",
         _GENERIC),
)

# torchrun's failure summary: the first failure its agent saw on one node.
ROOT_CAUSE = r"Root Cause \(first observed failure\) ?:"
_ROOT_CAUSE = re.compile(ROOT_CAUSE)
# srun's account of a task that ended badly; rank = task id when srun launched one task per GPU
SRUN_TASK_EXIT = r"srun: error: \S+: tasks? [0-9,-]+: Exited with exit code"
# a launcher's or the shell's word that a process ended badly (torchrun's agent, DeepSpeed's
# launcher, a crash, a Python traceback): an error exit, so the logs are not clean, even where
# no family says why
WORKER_EXIT = (r"failed \(exitcode: -?[1-9]\d*\) local_rank|exits with return code = -?[1-9]|Segmentation fault"
               r"|\(core dumped\)|^Traceback \(most recent call last\):|terminate called after throwing an instance of"
               r"|noticed that process rank \d+ with PID \d+ on node \S+ exited on"
               r"|terminated normally, but \d+ process(?:es)? returned"
               r"|exited with (?:a )?non-zero (?:exit )?(?:code|status)"
               r"|Fatal Python error: |clusterkit: (?:\d\d:\d\d:\d\d )?launcher exited with status [1-9]")
# clusterkit's own batch-log marker: one per (re)start of the job script
RESTART_MARK = r"clusterkit: job \d+ on \S+ \(restart \d+ of at most \d+\)"
# the job script stamps its own lines with the time (UTC, HH:MM:SS) since it logs signals
SUCCESS_MARK = r"clusterkit: (?:\d\d:\d\d:\d\d )?launcher exited with status 0\b"
_SUCCESS = re.compile(SUCCESS_MARK)

_EXC_LINE = re.compile(r"^\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::|\s*$)")
COMPILED = tuple((s, re.compile(s.pattern)) for s in SIGNATURES)


def trigger_pattern() -> str:
    """One alternation of every signature and marker: a line matching none of it is noise."""
    parts = [s.pattern for s in SIGNATURES] + [ROOT_CAUSE, SRUN_TASK_EXIT, WORKER_EXIT, RESTART_MARK,
                                              SUCCESS_MARK, CLEAN_EXIT, PROMPT, r"SeqNum=\d+"]
    return "|".join(f"(?:{p})" for p in parts)


def is_root_cause(line: str) -> bool:
    """torchrun's "Root Cause (first observed failure):" header (pasted copies add a blank before the colon)."""
    return _ROOT_CAUSE.search(line) is not None


def is_success(line: str) -> bool:
    """The job script's own line for a launcher that exited 0."""
    return _SUCCESS.search(line.rstrip("\r\n")) is not None


def classify(message: str) -> Signature | None:
    """The first signature ``message`` (a line without its rank prefix) matches, if any; none for
    clusterkit's own notices (:func:`is_own_notice`).

    The generic ``user-code`` signature needs the line to read as a Python exception line
    (``ValueError: ...``, ``torch.OutOfMemoryError: ...``), not just to mention "Error".
    """
    if is_own_notice(message):
        return None
    for sig, rx in COMPILED:
        if rx.search(message):
            if sig.patterns == (_GENERIC,) and not _EXC_LINE.match(message):
                continue
            return sig
    return None

