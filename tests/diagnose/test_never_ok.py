"""A failed job is never ``ok``; clusterkit's own notices are never evidence; the node and rank
named agree; hardware on a node outranks an out-of-memory there; the location forms of real logs.

Every log line here is a real one (its source beside it) or clusterkit's own words (its templates).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clusterkit.diagnose import lines
from clusterkit.diagnose.doctor import diagnose_files
from tests.diagnose.test_corpus import cases

_EVIDENCE_LINE = re.compile(r"^(?P<path>.+?):(?P<lineno>\d+): ")


def _verdict(tmp: Path, name: str, body: bytes) -> dict:
    p = tmp / name
    p.write_bytes(body)
    return diagnose_files([p])["verdict"]


def test_ok_never_rests_on_the_absence_of_a_known_line(tmp_path: Path) -> None:
    """Walk the whole corpus: take the line a verdict rests on out of the log, diagnose again, and
    again, until no line of the log is evidence.  A log that failed never becomes ``ok`` on the way."""
    walked = 0
    for case in cases():
        body = case.body.split(b"\n")
        v = _verdict(tmp_path, case.name, case.body)
        if v["category"] == "ok":
            continue
        for _ in range(60):
            own = [m for e in v["evidence"] if (m := _EVIDENCE_LINE.match(e)) and m["path"].endswith(case.name)]
            if not own:
                break
            del body[int(own[0]["lineno"]) - 1]
            v = _verdict(tmp_path, case.name, b"\n".join(body))
            walked += 1
            assert v["category"] != "ok", (case.name, v)
    assert walked > 100  # the walk did take lines out


# clusterkit's own notice on a rank whose torch is a CPU build (templates/nccl-probe.sh.j2)
_NOTICE = ("clusterkit: NCCL not detected on {node}: torch 2.5.1 has no CUDA (a CPU build) and no libnccl.so.2 on "
           "the loader path (libnccl.so.2: cannot open shared object file: No such file or directory)\n")
# the real Xid 79 line of akash-network/support#209 (dmesg -T), and the error line of liunian-Jay/MU-GOT#7
_XID79 = ("[Fri Apr  5 21:29:39 2024] NVRM: Xid (PCI:0000:a1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
          "off the bus.\n")
_CUDA_UNKNOWN = "RuntimeError: CUDA error: unknown error\n"


def _four_nodes(tmp: Path) -> list[Path]:
    """A 4-node srun job as clusterkit lays its logs out: one file per node, one rank per node."""
    logs = tmp / "logs"
    logs.mkdir()
    files = []
    for i in range(1, 5):
        text = _NOTICE.format(node=f"node{i}")
        if i == 3:
            text += _XID79 + _CUDA_UNKNOWN
        p = logs / f"77.r0.node{i}.out"
        p.write_text(text)
        files.append(p)
    batch = logs / "slurm-77.out"
    batch.write_text("clusterkit: job 77 on node[1-4] (restart 0 of at most 0)\n"
                     + _NOTICE.format(node="node1")
                     + "srun: error: node3: task 2: Exited with exit code 1\n"
                     + "clusterkit: 10:00:05 launcher exited with status 1\n")
    return [*files, batch]


def test_a_real_gpu_fault_on_one_node_is_named_there_and_clusterkits_notices_are_not_evidence(tmp_path: Path) -> None:
    v = diagnose_files(_four_nodes(tmp_path))["verdict"]
    assert v["category"] == "gpu-hardware", v
    assert v["node"] == "node3"
    assert v["rank"] in (2, None)  # task 2 ran on node3; never rank 0 (node1's)
    assert not any("clusterkit:" in e for e in v["evidence"]), v["evidence"]


def test_clusterkits_notices_alone_are_no_failure(tmp_path: Path) -> None:
    p = tmp_path / "77.r0.node1.out"
    p.write_text(_NOTICE.format(node="node1") * 3)
    v = diagnose_files([p])["verdict"]
    assert v["category"] == "unknown" and v["evidence"] == []  # not ok either: nothing shows a clean end


# the real OOM line of wxian3/NeuroLens#2 (the catalogue's example of its family)
_OOM = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 55.57 GiB. GPU 0 has a total capacty of "
        "12.00 GiB of which 9.02 GiB is free.\n")


def test_hardware_on_a_node_outranks_an_oom_at_a_later_restart_there(tmp_path: Path) -> None:
    r0 = tmp_path / "78.r0.node3.out"
    r0.write_text(_XID79)
    r1 = tmp_path / "78.r1.node3.out"
    r1.write_text(_OOM)
    rep = diagnose_files([r0, r1])
    v = rep["verdict"]
    assert v["category"] == "gpu-hardware" and v["node"] == "node3", v
    assert "restart 0" in v["summary"] and any("then gpu-oom" in e for e in v["evidence"])
    # an OOM on another node stays an OOM
    r1.rename(tmp_path / "78.r1.node4.out")
    v = diagnose_files([r0, tmp_path / "78.r1.node4.out"])["verdict"]
    assert (v["category"], v["node"]) == ("gpu-oom", "node4")


@pytest.mark.parametrize("line, node, rank, group", [
    # a monitoring alert that names the host (huggingface/m4-logs, tr-190-80b/chronicles.md)
    ("Xid errors on instance: ip-26-0-146-100, Error: May 19 07:08:57 ip-26-0-146-100 kernel: [680111.646286] NVRM: "
     "Xid (PCI:0000:10:1c): 63, pid=1850, Row Remapper: New row marked for remapping, reset gpu to activate",
     "ip-26-0-146-100", None, None),
    # pdsh's "host: " before a node's kernel log (the RmInitAdapter line of NVIDIA/gpu-operator#649)
    ("node7: [ 1097.650222] NVRM: GPU 0000:04:01.0: RmInitAdapter failed! (0x11:0x45:2525)", "node7", None, None),
    # a user's timestamp before torchrun's prefix (ai2cm/ace#679)
    ("2025-10-04T15:16:15.735Z [rank3]:[W1004 15:16:15.503072590 ProcessGroupNCCL.cpp:1479] Warning: WARNING: "
     "destroy_process_group() was not called before program exit", None, 3, None),
    # a rank of a process group other than the default one (vllm-project/vllm#17098): group-local
    ("[2025-04-15 00:31:11,815 E 808 17795] logging.cc:108: Unhandled exception: N3c1016DistBackendErrorE. what(): "
     "[PG ID 2 PG GUID 3 Rank 0] Process group watchdog thread terminated with", None, None, ("2", 0)),
    # ... and the global rank where the line names it too (the prefix of hiyouga/LlamaFactory#6269's line)
    ("[rank6]:[E1206 18:44:16.997991020 ProcessGroupNCCL.cpp:1515] [PG 1 Rank 6] Process group watchdog thread "
     "terminated with exception", None, 6, None),
    # the default group's rank is the global one (InternLM/lmdeploy#3258)
    ("  what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with exception: "
     "CUDA error: an illegal memory access was encountered", None, 2, None),
    # a container's host name in NCCL's prefix, behind a timestamp (pytorch/ci-infra#490)
    ("[2026-04-22 21:34:20] mt-l-x86iavx512-45-172-t4-4-csmpw-runner-g4sfw-workflow:202016:202235 [0] "
     "misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-WU88OE to 9637892 bytes",
     "mt-l-x86iavx512-45-172-t4-4-csmpw-runner-g4sfw-workflow", None, None),
    # Open MPI names the rank and the node that died (open-mpi/ompi#2661)
    ("mpirun noticed that process rank 0 with PID 21183 on node host01 exited on signal 9 (Killed).", "host01", 0,
     None),
    # DeepSpeed's ssh pre-check names the host (deepspeedai/DeepSpeed#4907)
    ("subprocess.CalledProcessError: Command 'ssh -o PasswordAuthentication=no 192.168.3.100 hostname' returned "
     "non-zero exit status 255.", "192.168.3.100", None, None),
    # a line pasted in Markdown backticks (nebius/soperator#854)
    ("`salloc: error: Node failure on worker-1`", "worker-1", None, None),
    # not a host: a program's name, a library's
    ("python3: can't open file '/home/u/train.py': [Errno 2] No such file or directory", None, None, None),
    ("ImportError: libcudart.so.8.0: cannot open shared object file: No such file or directory", None, None, None),
])
def test_location_forms(line: str, node: str | None, rank: int | None, group: tuple[str, int] | None) -> None:
    f = lines.facts(line, 2025)
    assert (f.node, f.rank, f.group_rank) == (node, rank, group)


def test_a_time_limit_or_a_cancel_names_no_node(tmp_path: Path) -> None:
    """slurmstepd writes these on the batch host; that host is not "the node" of the verdict."""
    for text, cat in (
        # labsyspharm/mcmicro#163 and qiskit-community/spank-plugins#17
        ("slurmstepd: error: *** JOB 13055114 ON compute-h-17-51 CANCELLED AT 2020-07-11T22:48:26 DUE TO TIME "
         "LIMIT ***\n", "slurm-time-limit"),
        ("slurmstepd: error: *** JOB 3 ON c1 CANCELLED AT 2025-02-13T15:47:35 ***\n", "slurm-cancelled"),
    ):
        v = _verdict(tmp_path, "slurm-1.out", text.encode())
        assert (v["category"], v["node"]) == (cat, None)


def test_group_local_rank_is_said_to_be_group_local(tmp_path: Path) -> None:
    # vllm-project/vllm#17098's line (its excerpt ends at "terminated with"), completed with its title's words
    text = ("[2025-04-15 00:31:11,815 E 808 17795] logging.cc:108: Unhandled exception: N3c1016DistBackendErrorE. "
            "what(): [PG ID 2 PG GUID 3 Rank 0] Process group watchdog thread terminated with exception: CUDA error: "
            "an illegal memory access was encountered\n")
    v = _verdict(tmp_path, "a.log", text.encode())
    assert v["category"] == "user-code" and v["rank"] is None
    assert "rank 0 of process group 2 (a group-local rank" in v["summary"]


def test_a_shell_prompt_names_the_host_of_the_output_below_it(tmp_path: Path) -> None:
    """xxd3vin/workspace#19: nvidia-smi run on bh174; envmodules/modules#341: srun run on the login
    node, whose output comes from the compute node (the prompt's host is not the node there)."""
    v = _verdict(tmp_path, "a.log", b"[root@bh174 chenyang]# nvidia-smi \n"
                 b"Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error\n")
    assert (v["category"], v["node"]) == ("gpu-hardware", "bh174")
    v = _verdict(tmp_path, "b.log", b"[root@cm-wsb-c4m8d200-1 local]# srun ml ava\n"
                 b"slurmstepd: error: execve(): ml: No such file or directory\n"
                 b"srun: error: cm-wsb-c4m8d200-4: task 0: Exited with exit code 2\n")
    assert (v["category"], v["node"]) == ("import-env", "cm-wsb-c4m8d200-4")
