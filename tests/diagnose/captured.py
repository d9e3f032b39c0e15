"""Log text as the real tools print it, for what the Slurm testbed cannot produce (no GPUs, no
InfiniBand, no NFS server).  Each sample follows the tool's own format: NCCL's
``host:pid:tid [cudaDev]`` prefix (the bracket is the local GPU), torch's c10 log prefix
``[E1201 09:24:07.123456789 ProcessGroupNCCL.cpp:616]`` behind torchrun's ``[rankN]:``, the
NVIDIA driver's ``NVRM: Xid`` kernel lines, torch's CUDA OOM message, errno text from strerror.
A blank that a tool prints at the end of a line is written ``\x20`` so that it survives editors.
"""

# One node's torchrun log: an IB completion error on local GPU 3 (global rank 27), then the
# ranks of every node time out or lose their peer.
NCCL_IB = """\
[rank24]:[2026-12-01 09:10:02,114] step 4200 loss 2.3141
node017:48211:48390 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.17<0>
node017:48211:48390 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.18<47324> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.0.0.17 remoteGid ::ffff:10.0.0.18
node017:48211:48390 [3] NCCL INFO transport/net.cc:1134 -> 6
node017:48211:48390 [3] NCCL INFO proxy.cc:1483 -> 6
node017:48211:48390 [3] proxy.cc:1664 NCCL WARN [Proxy Service 27] Failed to execute operation Connect from rank 27, retcode 6
[rank27]:[E1201 09:14:07.123456789 ProcessGroupNCCL.cpp:1671] [PG 0 Rank 27] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5
[rank25]:[E1201 09:24:07.551230112 ProcessGroupNCCL.cpp:616] [Rank 25] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4211, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600042 milliseconds before timing out.
[rank26]:[E1201 09:24:07.551299870 ProcessGroupNCCL.cpp:616] [Rank 26] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4211, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600043 milliseconds before timing out.
"""

# Only watchdog timeouts: rank 9 stopped one collective early (SeqNum 1187), the rest waited in 1188.
NCCL_TIMEOUT_ONLY = """\
[rank8]:[E1201 11:02:41.000112331 ProcessGroupNCCL.cpp:616] [Rank 8] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1188, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600011 milliseconds before timing out.
[rank9]:[E1201 11:02:41.020512001 ProcessGroupNCCL.cpp:616] [Rank 9] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1187, OpType=BROADCAST, NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.
[rank10]:[E1201 11:02:41.000931177 ProcessGroupNCCL.cpp:616] [Rank 10] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1188, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.
[rank10]:[E1201 11:02:41.001002412 ProcessGroupNCCL.cpp:630] [Rank 10] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
"""

# dmesg -T on the node whose GPU fell off the bus, and a syslog copy of a double-bit ECC error.
XID_DMESG = """\
[Tue Dec  1 08:59:58 2026] mlx5_core 0000:3b:00.0: mlx5_fw_tracer_handle_traces:740:(pid 1243): FW Tracer: 0x1
[Tue Dec  1 09:01:12 2026] NVRM: GPU at PCI:0000:b1:00: GPU-3e2f86a1-0f27-b3c5-1cd3-52a1f4e1e8c9
[Tue Dec  1 09:01:12 2026] NVRM: Xid (PCI:0000:b1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
[Tue Dec  1 09:01:12 2026] NVRM: GPU 0000:b1:00.0: GPU has fallen off the bus.
"""
ECC_SYSLOG = """\
Dec  1 09:01:07 gpu042 kernel: [1234567.890123] NVRM: Xid (PCI:0000:3b:00): 48, pid=48211, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.
Dec  1 09:01:07 gpu042 kernel: [1234567.890544] NVRM: Xid (PCI:0000:3b:00): 63, pid=48211, name=python, Row Remapper: New row marked for remapping, reset gpu to activate.
"""

CUDA_OOM = """\
[rank3]:[2026-12-01 10:00:01,002] step 12 loss 7.1203
[rank3]: Traceback (most recent call last):
[rank3]:   File "/home/ana/llm/train.py", line 211, in <module>
[rank3]:     loss.backward()
[rank3]:   File "/opt/conda/lib/python3.11/site-packages/torch/_tensor.py", line 581, in backward
[rank3]:     torch.autograd.backward(
[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.11 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.86 GiB memory in use. Of the allocated memory 74.12 GiB is allocated by PyTorch, and 2.01 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
[rank0]:[E1201 10:10:01.771002411 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=97, OpType=ALLREDUCE, NumelIn=65536, NumelOut=65536, Timeout(ms)=600000) ran for 600004 milliseconds before timing out.
"""

STALE_NFS = """\
[2026-12-01 07:30:11,845] [INFO] [logging.py:128:log_dist] [Rank 0] step=3000, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]
[rank14]: Traceback (most recent call last):
[rank14]:   File "/home/ana/llm/data.py", line 88, in __getitem__
[rank14]:     with open(self.shards[i], "rb") as fh:
[rank14]: OSError: [Errno 116] Stale file handle: '/home/ana/data/shard-00042.bin'
"""

SHM = """\
[rank1]:[2026-12-01 06:00:00,100] step 1 loss 9.8
[rank1]: RuntimeError: DataLoader worker (pid 81231) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.
"""

DEEPSPEED_BATCH = """\
[2026-12-01 05:10:00,001] [INFO] [launch.py:256:main] process 31811 spawned with command: ['/usr/bin/python', '-u', 'train.py', '--local_rank=0', '--deepspeed', 'ds.json']
[rank0]: Traceback (most recent call last):
[rank0]:   File "/opt/conda/lib/python3.11/site-packages/deepspeed/runtime/config.py", line 925, in _batch_assertion
[rank0]: AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 256 != 4 * 8 * 4
[2026-12-01 05:10:04,210] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=0', '--deepspeed', 'ds.json'] exits with return code = 1
"""

# torchrun's agent summary, exactly as torch.distributed.elastic prints it (captured from a
# real run: rank 1 raised, rank 0 lost its peer and was sent SIGTERM).
TORCHRUN_REAL = """\
W1201 15:28:35.750000 16605 site-packages/torch/distributed/run.py:982] *****************************************
[rank1]: Traceback (most recent call last):
[rank1]:   File "/tmp/dr/fail.py", line 7, in <module>
[rank1]:     raise ValueError("loss is nan at step 3")
[rank1]: ValueError: loss is nan at step 3
[rank0]: Traceback (most recent call last):
[rank0]:   File "/tmp/dr/fail.py", line 8, in <module>
[rank0]:     dist.all_reduce(t)
[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:406. This is typically caused by a remote worker crashing. Check the logs of the remote worker before reporting an error.
W1201 15:28:41.505000 16605 site-packages/torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 16689 closing signal SIGTERM
E1201 15:28:41.624000 16605 site-packages/torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 16690) of binary: /usr/bin/python3
Traceback (most recent call last):
  File "/usr/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\x20
============================================================
fail.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-01_15:28:41
  host      : gpu007
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 16689)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 16689
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_15:28:41
  host      : gpu007
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 16690)\x20
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""

# A run that completed: the exit barrier complains after the work is done (noise, not a cause).
EXIT_BARRIER_AFTER_SUCCESS = """\
[rank0]:[2026-12-01 04:00:00,000] step 100 loss 1.01
E1201 04:05:00.123000 7001 site-packages/torch/distributed/elastic/agent/server/api.py:956] Error waiting on exit barrier. Elapsed: 300.0 seconds
[rank0]: torch.distributed.DistNetworkError: Connection reset by peer
clusterkit: launcher exited with status 0
"""

# Watchdog lines of two process groups, in the form of the one real line of hiyouga/LlamaFactory#6269
# (ranks and sequence numbers set for the case): a group (PG 1) whose ranks stopped at different
# collectives, and the default group (PG 0) whose sequence numbers run on their own.
TWO_GROUPS = """\
[rank0]:[E1206 18:44:16.997991020 ProcessGroupNCCL.cpp:1515] [PG 0 Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600003 milliseconds before timing out.
[rank4]:[E1206 18:44:16.997991020 ProcessGroupNCCL.cpp:1515] [PG 1 Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7753, OpType=_REDUCE_SCATTER_BASE, NumelIn=544997376, NumelOut=68124672, Timeout(ms)=600000) ran for 600003 milliseconds before timing out.
[rank6]:[E1206 18:44:17.101000000 ProcessGroupNCCL.cpp:1515] [PG 1 Rank 6] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7752, OpType=_REDUCE_SCATTER_BASE, NumelIn=544997376, NumelOut=68124672, Timeout(ms)=600000) ran for 600003 milliseconds before timing out.
"""


# A 4-node torchrun job (torch 2.14.1, gloo) on the Slurm testbed whose node4 lost its link for
# 75 s (``ip link set eth0 down`` in its namespace): every rank's all-reduce timed out, rank 0's
# agent on node1 (the rendezvous store's host) ended, and the other agents lost the store.  Whole
# lines of the job's own logs, in their order; the Python tracebacks between them left out.
# node3's agent saw the store's connection closed by the other end: a consequence.  node4's saw
# the store stop answering (``waitForInput ... timed out``): the node whose network failed.
LINK_CUT_NODE1 = """\
[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 20000ms for send operation to complete
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_15:46:53
  host      : node1
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 31650)\x20
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""

LINK_CUT_NODE3 = """\
[rank2]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 20000ms for recv operation to complete
[W1202 15:46:53.477872811 TCPStore.cpp:115] [c10d] recvVector failed on SocketImpl(fd=4, addr=[1024:417e:597f:0:f762:c93b:5a7f:0]:32321, remote=[d02b:a5d8:fc7f:0:750:c93b:5a7f:0]:3179): Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?
W1202 15:46:53.641000 31608 site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1346] The node 'node3_31608_0' has failed to send a keep-alive heartbeat to the rendezvous '22777003' due to an error of type RendezvousConnectionError.
[W1202 15:46:53.540921822 TCPStore.cpp:106] [c10d] sendBytes failed on SocketImpl(fd=4, addr=[f035:a5d8:fc7f:0:8581:db3b:5a7f:0]:55461, remote=[d02b:a5d8:fc7f:0:750:c93b:5a7f:0]:3179): Broken pipe
torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.
"""

LINK_CUT_NODE4 = """\
[rank3]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 20000ms for recv operation to complete
[W1202 15:47:29.468120178 socket.cpp:469] [c10d] waitForInput: poll for socket SocketImpl(fd=4, addr=[ac4b:4279:17f:0:506a:4279:17f:0]:58759, remote=[50ed:87e5:fc7f:0:750:4979:17f:0]:1594) returned 0, likely a timeout
[W1202 15:47:29.468204423 socket.cpp:494] [c10d] waitForInput: socket SocketImpl(fd=4, addr=[ac4b:4279:17f:0:506a:4279:17f:0]:58759, remote=[50ed:87e5:fc7f:0:750:4979:17f:0]:1594) timed out after 60000ms
[W1202 15:47:52.120667885 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=4, addr=[40f1:87e5:fc7f:0:cd:150f:18d8:746f]:58759, remote=[50ed:87e5:fc7f:0:750:4979:17f:0]:1594): Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?
W1202 15:47:52.284000 31606 site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1346] The node 'node4_31606_0' has failed to send a keep-alive heartbeat to the rendezvous '22777003' due to an error of type RendezvousConnectionError.
torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.
"""


# The same test run again: node4's agent made no store request while its link was down, so it
# printed no timeout; it heard the store close only when its link came back, a minute after
# rank 0 failed (node1's Root Cause), and node2's and node3's agents ended without an error.
LINK_CUT_LATE_NODE1 = """\
[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 20000ms for send operation to complete
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_16:57:29
  host      : node1
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 18428)\x20
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""

LINK_CUT_LATE_NODE4 = """\
[rank3]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 20000ms for recv operation to complete
[W1202 16:58:29.433794199 TCPStore.cpp:115] [c10d] recvVector failed on SocketImpl(fd=4, addr=[1024:4122:807f:0:f762:c9df:807f:0]:8769, remote=[c04f:c794:ff7f:0:750:c9df:807f:0]:28219): Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?
W1202 16:58:29.589000 18395 site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1346] The node 'node4_18395_0' has failed to send a keep-alive heartbeat to the rendezvous '23490003' due to an error of type RendezvousConnectionError.
[W1202 16:58:29.438502131 TCPStore.cpp:106] [c10d] sendBytes failed on SocketImpl(fd=4, addr=[a051:c794:ff7f:0:5f:89c4:924:8180]:38087, remote=[c04f:c794:ff7f:0:750:c9df:807f:0]:28219): Broken pipe
torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.
"""

# torch's warning at a normal process end: the line of pytorch/examples#1387 as posted
CLEAN_EXIT_WARNING = """\
[rank0]:[W825 13:09:39.967659278 ProcessGroupNCCL.cpp:1538] Warning: WARNING: destroy_process_group() was not called before program exit, which can leak resources. For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())
"""
