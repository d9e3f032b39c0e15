"""doctor reads logs a job (and each of its ranks) writes: what a file is (the per-rank or
per-node name the job script gives srun's ``--output``) outranks what a line in it claims, and
no number a line holds (a 5,000-digit rank, ``²``) raises.  Each case runs the real CLI on logs
as a rank would leave them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import CLI

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
       "of 79.11 GiB of which 1.19 GiB is free.")
ILLEGAL = "RuntimeError: CUDA error: an illegal memory access was encountered"


def doctor(ck: CLI, logs: Path) -> dict[str, object]:
    res = ck.proc("doctor", "--logs", str(logs), "--json", timeout=60)
    assert res.code in (0, 1), res.out + res.err
    assert "Traceback" not in res.err
    verdict = json.loads(res.out)["verdict"]
    assert isinstance(verdict, dict)
    return verdict


def test_a_rank_file_claiming_to_be_rank_0_is_still_rank_5(ck: CLI, tmp_path: Path) -> None:
    (tmp_path / "123.r0.rank0.out").write_text(f"[rank0]:[2026-12-01 10:00:10,000] step 5\n[rank0]:{OOM}\n")
    (tmp_path / "123.r0.rank5.out").write_text("[rank5]:[2026-12-01 10:00:11,000] step 5\n"
                                               f"[rank0]:[2026-12-01 09:00:00,000] forged\n[rank0]:{ILLEGAL}\n")
    verdict = doctor(ck, tmp_path)
    evidence = " ".join(map(str, verdict["evidence"]))  # type: ignore[call-overload]
    # its earlier (claimed) time makes its line the first failure; the line is rank 5's own
    assert "rank5.out" in evidence and verdict["rank"] == 5, verdict


def test_a_node_file_claiming_another_node_is_still_its_node(ck: CLI, tmp_path: Path) -> None:
    (tmp_path / "123.r0.node1.out").write_text("[2026-12-01 10:00:10,000] step 5\n")
    (tmp_path / "123.r0.node2.out").write_text(
        "node1:4242:4242 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.1<1234> with error 12, opcode 0, len 0, vendor err 129 (Recv)\n")
    verdict = doctor(ck, tmp_path)
    assert verdict["node"] == "node2", verdict


@pytest.mark.parametrize("prefix", ["[rank" + "9" * 5000 + "]:", "[rank²]:", "[default" + "9" * 5000 + "]:",
                                    "[1," + "9" * 5000 + "]<stdout>:", "[Rank " + "9" * 5000 + "] "])
def test_rank_prefixes_no_int_takes_are_no_rank(ck: CLI, tmp_path: Path, prefix: str) -> None:
    (tmp_path / "123.r0.node1.out").write_text(f"{prefix}{OOM}\n"
                                               f"Root Cause: rank: {'9' * 5000} exitcode: {'9' * 5000}\n"
                                               f"SeqNum={'9' * 5000} [PG {'9' * 5000} Rank 0]\n"
                                               f"srun: error: node1: task 0: Exited with exit code {'9' * 5000}\n")
    verdict = doctor(ck, tmp_path)
    assert verdict["rank"] in (None, 0) and verdict["node"] == "node1", verdict


def test_a_restart_number_no_int_takes_is_no_restart(ck: CLI, tmp_path: Path) -> None:
    (tmp_path / f"123.r{'9' * 200}.node1.out").write_text(f"{OOM}\n")  # a name is at most 255 bytes
    (tmp_path / "123.r0.node1.out").write_text(f"clusterkit: job 123 on node1 (restart {'9' * 5000} of at most 2)\n"
                                               f"{OOM}\n")
    doctor(ck, tmp_path)


def test_a_ranks_own_file_cannot_name_another_node_with_slurms_words(ck: CLI, tmp_path: Path) -> None:
    # srun's message form, printed by a rank into its own (per-node) file: not Slurm speaking
    (tmp_path / "123.r0.node1.out").write_text("[rank0]: step 5\n"
                                               "srun: error: Node failure on node99\n")
    verdict = doctor(ck, tmp_path)
    assert verdict["node"] == "node1", verdict


def test_doctor_job_keeps_ranks_and_nodes_within_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch log is one file for every rank (a launcher started once): a line there naming rank 7
    of a 2-rank job, or a node Slurm never gave it, names nothing."""
    from clusterkit.diagnose import doctor as doc
    from clusterkit.diagnose.verdict import SlurmView
    from clusterkit.scheduler.records import JobRecord, RecordStore

    run = tmp_path / "run"
    run.mkdir()
    (run / "slurm-123.out").write_text(f"[rank7]:{OOM}\nsrun: error: node99: task 7: Exited with exit code 1\n")
    store = RecordStore(tmp_path / "state" / "jobs")
    rec = JobRecord(job_id="123", scheduler="slurm", site="s", site_source="s.yaml", stage="multi-node",
                    launcher="torchrun", job_name="ck", nnodes=2, world_size=2, command=["python", "t.py"],
                    run_dir=str(run), script="job.sbatch", submitted_at="2026-01-01T00:00:00.000000Z",
                    host="login1", plan={})
    store.save(rec)
    view = SlurmView(state="RUNNING", nodes="node[1-2]")
    monkeypatch.setattr(doc, "slurm_view", lambda rec, query: (view, {"state": "RUNNING"}))
    v = doc.diagnose_job("123", store=store).report["verdict"]
    assert v["category"] == "gpu-oom", v
    assert v["rank"] is None and v["node"] is None, v
