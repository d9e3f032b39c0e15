"""Flight-recorder dumps read back by ``clusterkit doctor``: written by real torch (gloo on
CPU, torch's own recorder and dump call; see stall_job.py for what gloo lacks), then bad
dumps, and the NCCL debug files --debug names."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clusterkit.diagnose import flight

from . import captured

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def real_dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run the two-rank stall under torchrun, the flight recorder on as clusterkit's nccl.env sets it."""
    pytest.importorskip("torch")
    run = tmp_path_factory.mktemp("run")
    (run / "logs").mkdir()
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
           "TORCH_FR_DUMP_TEMP_FILE": f"{run}/logs/fr-5150.r0.rank", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--standalone", str(HERE / "stall_job.py"), "4"],
                          env=env, capture_output=True, text=True, timeout=180)
    (run / "logs" / "5150.r0.node01.out").write_text(proc.stdout + proc.stderr)
    assert proc.returncode != 0, proc.stderr[-2000:]                    # rank 0 timed out
    assert sorted(p.name for p in (run / "logs").glob("fr-*")) == ["fr-5150.r0.rank0", "fr-5150.r0.rank1"]
    return run


def _doctor(ck: Any, *paths: Path) -> dict[str, Any]:
    r = ck("doctor", "--logs", *map(str, paths), "--json")
    assert "Traceback" not in r.err, r.err
    return dict(json.loads(r.out))


@pytest.mark.torch
def test_real_dump_names_the_rank_behind_and_the_collective(ck: Any, real_dumps: Path) -> None:
    fr = _doctor(ck, real_dumps / "logs")["flight_recorder"]
    assert fr["dumps"] == 2 and fr["ranks"] == [0, 1] and fr["unreadable"] == []
    (f,) = fr["findings"]
    assert (f["kind"], f["ranks"], f["waiting"]) == ("behind", [1], [0])
    assert (f["seq"], f["op"]) == (4, "gloo:broadcast")
    assert (f["waiting_seq"], f["waiting_op"]) == (5, "gloo:all_reduce")
    text = ck("doctor", "--logs", str(real_dumps / "logs"))
    assert "flight recorder: rank 1 behind in process group" in text.out
    assert "last collective #4 gloo:broadcast, while rank 0 waited in #5 gloo:all_reduce" in text.out


@pytest.mark.torch
def test_doctor_job_finds_the_dumps_in_its_run_directory(real_dumps: Path) -> None:
    dumps = flight.job_dumps(real_dumps, "5150")
    assert [p.name for p in dumps] == ["fr-5150.r0.rank0", "fr-5150.r0.rank1"]
    assert flight.job_dumps(real_dumps, "515") == []             # another job's id is not a prefix match


def _pickled(obj: Any) -> bytes:
    return pickle.dumps(obj)


class _Boom:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch pwned",))


@pytest.mark.parametrize("content, why", [
    (b"", "not a flight-recorder dump"),
    (b"\x80\x04garbage", "not a flight-recorder dump"),
    (_pickled(_Boom()), "refused posix.system"),
    (_pickled({"version": "2.10"}), "no entries list"),
    (_pickled(["not", "a", "dict"]), "no entries list"),
], ids=["empty", "garbage", "code", "no-entries", "a-list"])
def test_bad_dumps_are_one_line_each_and_never_run(ck: Any, tmp_path: Path, content: bytes, why: str) -> None:
    (tmp_path / "fr-1.r0.rank0").write_bytes(content)
    (tmp_path / "1.r0.node1.out").write_text(captured.NCCL_IB)
    fr = _doctor(ck, tmp_path)["flight_recorder"]
    assert fr["dumps"] == 0 and len(fr["unreadable"]) == 1 and why in fr["unreadable"][0], fr
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()
    # a bad dump and nothing else to read: one line, exit 3
    (tmp_path / "1.r0.node1.out").unlink()
    r = ck("doctor", "--logs", str(tmp_path))
    assert r.code == 3 and r.err.startswith("clusterkit: error: ") and why in r.err and "Traceback" not in r.err


def test_odd_entries_are_skipped_not_trusted(tmp_path: Path) -> None:
    entries = [{"collective_seq_id": "7", "profiling_name": "x"}, {"collective_seq_id": True},
               {"collective_seq_id": 3, "profiling_name": "nccl:all_reduce\x1b[31m", "state": "completed",
                "process_group": ["0", "default_pg"]}, "junk"]
    (tmp_path / "nccl_trace_rank_2").write_bytes(pickle.dumps({"entries": entries}))
    d = flight.read_dump(tmp_path / "nccl_trace_rank_2")
    assert isinstance(d, flight.Dump) and d.rank == 2
    assert d.last == {"default_pg": flight.Collective(3, "nccl:all_reduce", "completed")}


def test_a_mismatch_at_one_sequence_number(tmp_path: Path) -> None:
    for rank, op in ((0, "nccl:all_reduce"), (1, "nccl:all_gather")):
        e = {"collective_seq_id": 9, "profiling_name": op, "state": "started", "process_group": ["1", "tp"]}
        (tmp_path / f"fr-7.r2.rank{rank}").write_bytes(pickle.dumps({"entries": [e]}))
    got = flight.read(sorted(tmp_path.iterdir()))
    (f,) = got["findings"]
    assert (f["kind"], f["restart"], f["group"], f["seq"]) == ("mismatch", 2, "tp", 9)


def test_nccl_debug_file_is_read_with_its_restart_and_node(ck: Any, tmp_path: Path) -> None:
    """--debug's NCCL_DEBUG_FILE (logs/nccl-<job>.r<restart>.<host>.<pid>.log) holds the WARN lines."""
    name = tmp_path / "logs" / "nccl-9001.r1.node017.48211.log"
    name.parent.mkdir()
    name.write_text(captured.NCCL_IB)
    rep = _doctor(ck, tmp_path / "logs")
    assert [r["restart"] for r in rep["restarts"]] == [1]
    assert (rep["verdict"]["category"], rep["verdict"]["node"]) == ("nccl-network", "node017")
