"""``clusterkit doctor --logs`` on captured text, one case per category the testbed cannot
produce, plus the line parsers and bad input.  Everything runs through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterkit.diagnose import lines, reader
from tests.conftest import assert_one_line_error

from . import captured


def _doctor(ck, tmp_path: Path, files: dict[str, str | bytes], *extra: str) -> tuple[int, dict]:
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
    r = ck("doctor", "--logs", *(str(tmp_path / n) for n in files), "--json", *extra)
    assert "Traceback" not in r.err, r.err
    return r.code, json.loads(r.out)


@pytest.mark.parametrize("name, text, category, node, rank, evidence", [
    ("logs/9001.r0.node017.out", captured.NCCL_IB, "nccl-network", "node017", None, "Got completion from peer"),
    ("dmesg-gpu007.txt", captured.XID_DMESG, "gpu-hardware", None, None, "Xid (PCI:0000:b1:00): 79"),
    ("kern.log", captured.ECC_SYSLOG, "gpu-hardware", "gpu042", None, "double bit error"),
    ("logs/9002.r0.gpu003.out", captured.CUDA_OOM, "gpu-oom", "gpu003", 3, "CUDA out of memory"),
    ("logs/9003.r0.gpu011.out", captured.STALE_NFS, "filesystem", "gpu011", 14, "Stale file handle"),
    ("logs/9004.r0.gpu001.out", captured.SHM, "shm", "gpu001", 1, "Bus error"),
    ("logs/9005.r0.gpu001.out", captured.DEEPSPEED_BATCH, "launcher-config", "gpu001", 0, "train_batch_size"),
    ("logs/9006.r0.gpu007.out", captured.TORCHRUN_REAL, "user-code", "gpu007", 1, "ValueError: loss is nan"),
], ids=["nccl-ib", "xid-79", "ecc-dbe", "cuda-oom", "stale-nfs", "shm", "deepspeed-batch", "torchrun"])
def test_captured_failure_is_diagnosed(ck, tmp_path: Path, name: str, text: str, category: str,
                                       node: str | None, rank: int | None, evidence: str) -> None:
    code, rep = _doctor(ck, tmp_path, {name: text})
    v = rep["verdict"]
    assert code == 1
    assert (v["category"], v["node"], v["rank"]) == (category, node, rank)
    assert evidence in v["evidence"][0]
    assert v["evidence"][0].startswith(str(tmp_path / name) + ":")  # file:line
    assert v["advice"]


def test_evidence_line_numbers_are_real(ck, tmp_path: Path) -> None:
    _code, rep = _doctor(ck, tmp_path, {"logs/9002.r0.gpu003.out": captured.CUDA_OOM})
    _path, lineno, text = rep["verdict"]["evidence"][0].split(":", 2)
    assert captured.CUDA_OOM.splitlines()[int(lineno) - 1].strip().startswith(text.strip())  # long lines are cut


def test_cascade_is_counted_never_the_cause(ck, tmp_path: Path) -> None:
    _code, rep = _doctor(ck, tmp_path, {"logs/9001.r0.node017.out": captured.NCCL_IB,
                                        "logs/9006.r0.gpu007.out": captured.TORCHRUN_REAL})
    cascade = {c["category"]: c for c in rep["cascade"]}
    assert cascade["nccl-timeout"]["ranks"] == [25, 26]
    assert cascade["connection-reset"]["count"] == 2 and cascade["connection-reset"]["ranks"] == [0, 27]
    assert cascade["child-failed"]["count"] == 1
    # the IB error (09:10) came long before rank 1's exception (15:28): it is the root cause
    assert rep["verdict"]["category"] == "nccl-network"


def test_the_store_closing_is_a_consequence_its_timeout_names_the_node(ck, tmp_path: Path) -> None:
    """A rendezvous error after the store's connection was closed by the other end (its host's
    agent ended) is a consequence; the node whose store connection timed out is the cause, though
    node3's error came first."""
    files = {"logs/22777003.r0.node1.out": captured.LINK_CUT_NODE1,
             "logs/22777003.r0.node3.out": captured.LINK_CUT_NODE3,
             "logs/22777003.r0.node4.out": captured.LINK_CUT_NODE4}
    code, rep = _doctor(ck, tmp_path, files)
    v = rep["verdict"]
    assert code == 1 and (v["category"], v["node"]) == ("rendezvous", "node4"), v
    assert "waitForInput" in v["evidence"][0] and v["time"].startswith("2026-12-02T15:47:29"), v
    # without node4's log nothing names the cause, and node3, which only lost the store, is not blamed
    del files["logs/22777003.r0.node4.out"]
    (tmp_path / "logs" / "22777003.r0.node4.out").unlink()
    _code, rep = _doctor(ck, tmp_path, files)
    v = rep["verdict"]
    assert (v["category"], v["node"], v["rank"]) == ("unknown", "node1", 0), v


def test_a_node_that_hears_the_store_close_a_minute_late_is_the_cause(ck, tmp_path: Path) -> None:
    """node4 heard the store close 60 s after rank 0 failed: it could not hear it sooner."""
    code, rep = _doctor(ck, tmp_path, {"logs/23490003.r0.node1.out": captured.LINK_CUT_LATE_NODE1,
                                       "logs/23490003.r0.node4.out": captured.LINK_CUT_LATE_NODE4})
    v = rep["verdict"]
    assert code == 1 and (v["category"], v["node"]) == ("rendezvous", "node4"), v


def test_only_timeouts_name_the_rank_that_is_behind(ck, tmp_path: Path) -> None:
    code, rep = _doctor(ck, tmp_path, {"logs/9007.r0.gpu002.out": captured.NCCL_TIMEOUT_ONLY})
    v = rep["verdict"]
    assert code == 1 and (v["category"], v["rank"]) == ("nccl-timeout", 9)
    assert "collective 1187" in v["summary"] and "1188" in v["summary"]


def test_completed_run_is_ok_whatever_the_noise(ck, tmp_path: Path) -> None:
    code, rep = _doctor(ck, tmp_path, {"logs/slurm-9008.out": captured.EXIT_BARRIER_AFTER_SUCCESS})
    assert code == 0 and rep["verdict"]["category"] == "ok"
    assert {c["category"] for c in rep["cascade"]} == {"exit-barrier", "connection-reset"}


def test_restarts_are_diagnosed_apart_newest_first(ck, tmp_path: Path) -> None:
    batch = ("clusterkit: job 9009 on gpu[001-002] (restart 0 of at most 2)\n"
             "slurmstepd: error: *** JOB 9009 ON gpu001 CANCELLED AT 2026-12-01T10:00:00 DUE TO PREEMPTION ***\n"
             "clusterkit: job 9009 on gpu[003-004] (restart 1 of at most 2)\n")
    _code, rep = _doctor(ck, tmp_path, {"logs/slurm-9009.out": batch,
                                        "logs/9009.r1.gpu003.out": captured.CUDA_OOM})
    assert [r["restart"] for r in rep["restarts"]] == [1, 0]
    assert [r["verdict"]["category"] for r in rep["restarts"]] == ["gpu-oom", "slurm-preempted"]
    assert rep["verdict"] == rep["restarts"][0]["verdict"]


def test_human_report(ck, tmp_path: Path) -> None:
    p = tmp_path / "9002.r0.gpu003.out"
    p.write_text(captured.CUDA_OOM)
    r = ck("doctor", "--logs", str(p))
    assert r.code == 1
    first = r.out.splitlines()[0]
    assert first.startswith("gpu-oom: a GPU ran out of memory: torch.OutOfMemoryError: CUDA out of memory.")
    assert "  node gpu003, rank 3, time 2026-12-01T10:00:01" in r.out
    assert "  cascade: nccl-timeout x1 (ranks 0)" in r.out
    assert "  advice: lower the micro batch: --set micro_batch=N (deepspeed, megatron: in their config" in r.out


# --------------------------------------------------------------------------- line parsers

@pytest.mark.parametrize("line, iso", [
    ("[2026-12-01 15:39:30,374] [WARNING] [real_accelerator.py:213:get_accelerator] Setting accelerator to CPU.",
     "2026-12-01T15:39:30"),
    ("E1201 15:28:41.624000 16605 site-packages/torch/distributed/elastic/multiprocessing/api.py:1002] failed",
     "2026-12-01T15:28:41"),
    ("[rank25]:[E1201 09:24:07.551230112 ProcessGroupNCCL.cpp:616] [Rank 25] Watchdog caught", "2026-12-01T09:24:07"),
    ("slurmstepd: error: *** JOB 7 ON node1 CANCELLED AT 2026-12-01T15:37:22 DUE TO TIME LIMIT ***",
     "2026-12-01T15:37:22"),
    ("  time      : 2026-12-01_15:28:41", "2026-12-01T15:28:41"),
    ("Dec  1 09:01:07 gpu042 kernel: [1234567.890123] NVRM: Xid (PCI:0000:3b:00): 48, pid=1", "2026-12-01T09:01:07"),
    ("[Tue Dec  1 09:01:12 2026] NVRM: Xid (PCI:0000:b1:00): 79, pid='<unknown>'", "2026-12-01T09:01:12"),
    ("node017:48211:48390 [3] NCCL INFO transport/net.cc:1134 -> 6", None),
])
def test_line_time(line: str, iso: str | None) -> None:
    assert lines.iso(lines.line_time(line, 2026)) == iso


@pytest.mark.parametrize("line, rank, local, node", [
    ("[rank27]:[E1201 09:14:07.123456789 ProcessGroupNCCL.cpp:1671] [PG 0 Rank 27] ...", 27, None, None),
    ("[default3]:Traceback (most recent call last):", None, 3, None),
    ("node017:48211:48390 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion", None, None, "node017"),
    ("[2026-12-01 07:30:11,845] [INFO] [logging.py:128:log_dist] [Rank 0] step=3000", 0, None, None),
    ("srun: error: node2: task 5: Exited with exit code 1", None, None, "node2"),
    ("srun: error: Node failure on node3", None, None, "node3"),
    ("slurmstepd-node1: error: Exceeded job memory limit", None, None, "node1"),
    ("Dec  1 09:01:07 gpu042 kernel: [1234567.890123] NVRM: Xid", None, None, "gpu042"),
    # forms seen in the corpus (tests/diagnose/corpus): Open MPI's tag before NCCL's host prefix
    ("[1,13]<stdout>:nccl-tests-worker-1:35:89 [5] ofi_process_cq:1039 NCCL WARN NET/OFI Request", 13, None,
     "nccl-tests-worker-1"),
    ("Sun Oct  1 17:01:10 2017[1,30]<stdout>:[1506866470.744682] [clx-hercules-065:1411 :0]       dc_verbs.c:633",
     30, None, "clx-hercules-065"),
    ("[ast1815:6807 :0:6807] ib_mlx5_log.c:115  FATAL: Error on mlx5_3:1 QP 0xe6d7", None, None, "ast1815"),
    ("[rank6]:[E1206 18:44:16.997991020 ProcessGroupNCCL.cpp:1515] [PG 1 Rank 6] Process group watchdog", 6, None,
     None),
    ("  what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated", 2, None, None),
    ("E0325 20:57:27.620000 2606 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] failed "
     "(exitcode: -9) local_rank: 5 (pid: 2630) of binary: /root/miniconda3/bin/python", None, 5, None),
    ("[ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', '--local_rank=0'] exits with "
     "return code = -9", None, 0, None),
    ("Steps:   0%|          | 1/500000 [12:44<14459:40:43, 104.11s/it, loss=0.36, lr=5e-6]n124-137-109:312247:326969 "
     "[0] NCCL INFO misc/socket.cc:829 -> 3", None, None, "n124-137-109"),
    ("slurmstepd: error: *** JOB 3884617 ON node023 CANCELLED AT 2018-08-19T16:30:21 DUE TO TIME LIMIT ***",
     None, None, "node023"),
    ("salloc: error: Node failure on worker-1", None, None, "worker-1"),
])
def test_line_rank_and_node(line: str, rank: int | None, local: int | None, node: str | None) -> None:
    f = lines.facts(line, 2026)
    assert (f.rank, f.local_rank, f.node) == (rank, local, node)


def test_srun_names_a_task_not_a_rank() -> None:
    """A task is a rank only where srun started one per GPU: the verdict decides, not the line."""
    assert lines.srun_task("srun: error: NODE: task 0: Out Of Memory") == 0
    assert lines.srun_task("srun: error: nid01934: tasks 2,4-5,7: Terminated") is None


def test_lines_glued_by_a_progress_bar_or_a_carriage_return(ck, tmp_path: Path) -> None:
    """tqdm rewrites its line with \\r; the next tool's line starts after it, on the same terminal line."""
    text = ("step 1\n 13%|#3        | 251/1891 [2:55:53<10:20:11, 22.69s/it]\r 13%|#3        | 252/1891 "
            "[2:56:13<9:57:30, 21.87s/it]\r[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            "2.00 GiB.\r\n100%|##########| 2/2 [00:38<00:00, 19.26s/it]srun: error: gpu004: task 3: Exited with "
            "exit code 1\n")
    code, rep = _doctor(ck, tmp_path, {"train.log": text})
    v = rep["verdict"]
    assert (code, v["category"], v["rank"], v["node"]) == (1, "gpu-oom", 3, "gpu004")
    assert v["evidence"][0].endswith(":2: [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                     "2.00 GiB.")


def test_the_rank_behind_is_found_within_its_own_process_group(ck, tmp_path: Path) -> None:
    code, rep = _doctor(ck, tmp_path, {"train.log": captured.TWO_GROUPS})
    v = rep["verdict"]
    assert (code, v["category"], v["rank"]) == (1, "nccl-timeout", 6)  # not rank 0, whose SeqNum 7 is in PG 0
    assert v["summary"].startswith("process group 1: rank 6 is behind: its watchdog timed out at collective "
                                   "7752")


def test_a_tee_prefix_is_a_local_rank_made_global_by_the_root_cause(ck, tmp_path: Path) -> None:
    """torchrun --tee 3 writes [default1]: for local rank 1; its Root Cause entry says that the
    node's local rank 0 is global rank 4, so local rank 1 there is rank 5."""
    text = (captured.TORCHRUN_REAL.replace("[rank1]:", "[default1]:").replace("[rank0]:", "[default0]:")
            .replace("rank      : 1 (local_rank: 1)", "rank      : 4 (local_rank: 0)"))
    code, rep = _doctor(ck, tmp_path, {"logs/9013.r0.gpu007.out": text})
    v = rep["verdict"]
    assert (code, v["category"], v["node"], v["rank"]) == (1, "user-code", "gpu007", 5)


def test_root_cause_block_across_a_chunk_boundary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "9010.r0.gpu007.out"
    p.write_text(captured.TORCHRUN_REAL)
    cut = captured.TORCHRUN_REAL.index("Root Cause") + 40
    monkeypatch.setattr(reader, "CHUNK", cut)
    scan = reader.scan_file(p)
    (rc,) = scan.root_causes
    assert (rc.rank, rc.local_rank, rc.exitcode, rc.node) == (1, 1, 1, "gpu007")
    assert lines.iso(rc.time) == "2026-12-01T15:28:41"
    assert captured.TORCHRUN_REAL.splitlines()[rc.lineno - 1] == "Root Cause (first observed failure):"


# --------------------------------------------------------------------------- bad input

def test_binary_junk_and_long_lines_give_a_verdict(ck, tmp_path: Path) -> None:
    junk = bytes(range(256)) * 4000 + b"\x00" * (3 << 20) + b"\n" + captured.STALE_NFS.encode() + b"\xff\xfe" * 10
    code, rep = _doctor(ck, tmp_path, {"logs/9011.r0.gpu011.out": junk})
    assert code == 1 and rep["verdict"]["category"] == "filesystem"
    assert rep["files"]["bytes"] == len(junk)


def test_logs_without_a_failure_are_not_ok_without_a_clean_end(ck, tmp_path: Path) -> None:
    """``ok`` needs positive evidence: logs that merely hold no known failure line are ``unknown``."""
    code, rep = _doctor(ck, tmp_path, {"a.log": "step 1 loss 2.0\nstep 2 loss 1.9\n", "empty.log": ""})
    assert code == 1 and rep["verdict"]["category"] == "unknown"
    assert "nothing in them shows that the job ended cleanly" in rep["verdict"]["summary"]
    assert rep["files"]["read"] == 2


def test_logs_that_end_cleanly_are_ok(ck, tmp_path: Path) -> None:
    """torch's warning at a process's normal end (the line of pytorch/examples#1387) is a clean end."""
    code, rep = _doctor(ck, tmp_path, {"a.log": "step 1 loss 2.0\n" + captured.CLEAN_EXIT_WARNING})
    assert code == 0 and rep["verdict"]["category"] == "ok"
    # the same end after a failure is no clean end
    code, rep = _doctor(ck, tmp_path, {"a.log": "Segmentation fault (core dumped)\n" + captured.CLEAN_EXIT_WARNING})
    assert code == 1 and rep["verdict"]["category"] == "unknown"


@pytest.mark.parametrize("text", [
    "step 1 loss 2.0\nsrun: error: node3: task 2: Exited with exit code 3\n",
    "step 1 loss 2.0\nE1201 10:00:00.100000 77 api.py:1002] failed (exitcode: 3) local_rank: 0 (pid: 78)\n",
    "step 1 loss 2.0\nSegmentation fault (core dumped)\n",
    "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n",
], ids=["srun-exit", "torchrun-agent-exit", "segfault", "cut-traceback"])
def test_a_failure_without_a_known_cause_is_unknown(ck, tmp_path: Path, text: str) -> None:
    code, rep = _doctor(ck, tmp_path, {"a.log": text})
    assert code == 1 and rep["verdict"]["category"] == "unknown"


def test_node_failure_names_the_node_srun_lost_not_the_survivor(ck, tmp_path: Path) -> None:
    """slurmstepd on a surviving node names itself; srun, in the batch log, names the node that
    failed (the lines of a node set down mid-job on the Slurm testbed, slurm-wlm 22.05)."""
    stepd = ("slurmstepd: error: *** JOB 18086010 ON node3 CANCELLED AT 2026-12-02T05:32:28 DUE TO NODE FAILURE, "
             "SEE SLURMCTLD LOG FOR DETAILS ***\n")
    code, rep = _doctor(ck, tmp_path, {"logs/18086010.r0.node3.out": stepd,
                                       "logs/18086010.r0.sbatch.out": "srun: error: Node failure on node4\n"})
    v = rep["verdict"]
    assert (code, v["category"], v["node"]) == (1, "slurm-node-failure", "node4")


def test_the_shells_killed_is_host_memory(ck, tmp_path: Path) -> None:
    """bash prints "Killed" for a foreground job that got SIGKILL (ArjunaCluster/ArjunaUsers#52)."""
    code, rep = _doctor(ck, tmp_path, {"a.log": "Epoch: [0][511/1736]\t Loss 0.5117 MAE 0.6075 RMSE 0.7153\nKilled\n"})
    assert code == 1 and rep["verdict"]["category"] == "host-oom"


def test_missing_path_is_a_warning_if_others_are_there(ck, tmp_path: Path) -> None:
    (tmp_path / "9002.r0.gpu003.out").write_text(captured.CUDA_OOM)
    r = ck("doctor", "--logs", str(tmp_path / "nope.log"), str(tmp_path / "9002.r0.gpu003.out"))
    assert r.code == 1 and r.out.startswith("gpu-oom:")
    assert r.err == f"clusterkit: warning: {tmp_path / 'nope.log'}: no such file or directory\n"


def test_nothing_to_read_is_exit_3(ck, tmp_path: Path) -> None:
    r = ck("doctor", "--logs", str(tmp_path / "nope.log"))
    assert_one_line_error(r, 3, "no log files to read", "nope.log")


def test_directory_without_files_is_exit_3(ck, tmp_path: Path) -> None:
    (tmp_path / "logs" / "empty").mkdir(parents=True)
    r = ck("doctor", "--logs", str(tmp_path / "logs"))
    assert_one_line_error(r, 3, "no log files to read", str(tmp_path / "logs"))


@pytest.mark.parametrize("args, needle", [
    ((), "no job records in"),   # no JOB: the latest job, and there is none
    (("1", "2"), "give one JOB (or none: the job you submitted last), or --logs PATH..."),
    (("--logs",), "--logs needs at least one PATH"),
    (("--bogus",), "No such option '--bogus'"),
])
def test_usage_errors_are_exit_2(ck, args: tuple[str, ...], needle: str, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path))
    assert_one_line_error(ck("doctor", *args), 2, needle)


def test_unknown_job_is_a_clear_error(ck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path))
    assert_one_line_error(ck("doctor", "424242"), 2, "no job record for '424242'")


def test_trigger_finds_the_same_lines_with_re2_and_python_re() -> None:
    """Signatures are written in the common subset of both engines: same candidate lines."""
    import re

    fallback = re.compile(reader.catalogue.trigger_pattern().encode(), re.M)
    for name in dir(captured):
        text = getattr(captured, name)
        if not isinstance(text, str) or name.startswith("_"):
            continue
        data = text.encode()
        fast = {data.rfind(b"\n", 0, m.start()) for m in reader.TRIGGER.finditer(data)}
        slow = {data.rfind(b"\n", 0, m.start()) for m in fallback.finditer(data)}
        assert fast == slow and fast, name


def test_scan_without_re2_gives_the_same_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    p = tmp_path / "9012.r0.node017.out"
    p.write_text(captured.NCCL_IB + captured.TORCHRUN_REAL)
    fast = reader.scan_file(p)
    monkeypatch.setattr(reader, "TRIGGER", re.compile(reader.catalogue.trigger_pattern().encode(), re.M))
    slow = reader.scan_file(p)
    assert [(f.category, f.lineno) for f in slow.findings] == [(f.category, f.lineno) for f in fast.findings]
    assert slow.cascade == fast.cascade and len(slow.root_causes) == len(fast.root_causes) == 1


def test_the_job_scripts_success_line_with_and_without_its_time_stamp() -> None:
    """The job script stamps its own lines (`clusterkit: 17:10:47 launcher exited ...`)."""
    from clusterkit.diagnose import catalogue

    assert catalogue.is_success("clusterkit: launcher exited with status 0")
    assert catalogue.is_success("clusterkit: 17:10:47 launcher exited with status 0\n")
    assert not catalogue.is_success("clusterkit: 17:10:47 launcher exited with status 143")
    assert not catalogue.is_success("clusterkit: launcher exited with status 01")


class _SacctStandIn:
    """Stands in for SlurmQuery.run: sacct's answer as captured (this testbed keeps no accounting)."""

    timeout_s = 5.0

    def __init__(self, stdout: str, returncode: int = 0) -> None:
        self.stdout, self.returncode, self.argv = stdout, returncode, []

    def run(self, argv, timeout):  # type: ignore[no-untyped-def]
        import subprocess

        self.argv = list(argv)
        return subprocess.CompletedProcess(argv, self.returncode, self.stdout, "")


SACCT_STEPS = """\
4711|FAILED|1:0|node[1-2]
4711.batch|FAILED|1:0|node1
4711.extern|COMPLETED|0:0|node[1-2]
4711.0|CANCELLED by 0|0:15|node[1-2]
4711.1|OUT_OF_MEMORY|0:125
"""


def test_per_step_rows_come_from_sacct_with_the_fields_asked_for() -> None:
    from clusterkit.scheduler.slurm.steps import job_steps

    q = _SacctStandIn(SACCT_STEPS)
    rows = job_steps("4711", q)  # type: ignore[arg-type]
    assert q.argv[-1] == "JobID,State,ExitCode,NodeList"
    assert [r["step"] for r in rows] == ["4711", "4711.batch", "4711.extern", "4711.0"]  # the short row is left out
    assert rows[3] == {"step": "4711.0", "state": "CANCELLED by 0", "exit_code": "0:15", "nodes": "node[1-2]"}
    assert job_steps("4711", _SacctStandIn("", returncode=1)) == []  # type: ignore[arg-type]
