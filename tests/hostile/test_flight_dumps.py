"""Flight-recorder dumps are pickles others wrote: plain data within bounds.  A few hundred bytes of
shared references (a "billion laughs" of memo references), millions of one-byte opcodes, a number
of megabytes or a deep nest must each be one unreadable dump, quickly, never a hang, a memory
blow-up or a traceback.  Each case runs the real ``doctor --logs`` in its own process, bounded."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.diagnose import captured

DOCTOR_S = 20.0   # a regression hangs (exponential expansion); the bound turns it into a failure


def _laughs(levels: int = 12, fan: int = 10) -> bytes:
    x: object = "lol"
    for _ in range(levels):
        x = [x] * fan          # pickled once, then referenced through the memo
    entry = {"collective_seq_id": 1, "profiling_name": x, "process_group": ["0", ""], "state": "scheduled",
             "pg_id": x}
    return pickle.dumps({"entries": [entry]}, protocol=4)


def _many_lists(n: int = 3_000_000) -> bytes:
    # PROTO 4, EMPTY_LIST, MARK, n x EMPTY_LIST, APPENDS, STOP: 2 bytes... 1 byte per list
    return b"\x80\x04]" + b"(" + b"]" * n + b"e."


def _huge_int() -> bytes:
    big = 1 << (8 * 4_000_000)
    return pickle.dumps({"entries": [{"collective_seq_id": big, "profiling_name": big, "pg_id": big}]}, protocol=4)


def _deep(n: int = 200_000) -> bytes:
    return b"\x80\x04" + b"]" * n + b"a" * (n - 1) + b"."


def _doctor(tmp_path: Path, content: bytes) -> tuple[dict, float]:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "fr-7.r0.rank0").write_bytes(content)
    (logs / "7.r0.node1.out").write_text(captured.NCCL_IB)   # a real log beside it: the report is made
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "clusterkit", "doctor", "--logs", str(logs), "--json"],
                       capture_output=True, text=True, timeout=DOCTOR_S)
    took = time.monotonic() - t0
    assert "Traceback" not in p.stderr and p.stdout, p.stderr[-2000:]
    return json.loads(p.stdout)["flight_recorder"], took


@pytest.mark.parametrize("make, why", [
    (_laughs, "values once shared references are followed"),
    (_many_lists, "pickle opcodes"),
    (_huge_int, "a number of more than"),
    (_deep, "not a flight-recorder dump"),
], ids=["billion-laughs", "millions-of-lists", "huge-int", "deep"])
def test_a_hostile_dump_is_one_unreadable_dump(tmp_path: Path, make, why: str) -> None:  # type: ignore[no-untyped-def]
    content = make()
    fr, _ = _doctor(tmp_path, content)
    assert fr["dumps"] == 0 and len(fr["unreadable"]) == 1, fr
    assert why in fr["unreadable"][0]
    assert len(fr["unreadable"][0]) < 400


def test_the_billion_laughs_dump_is_small() -> None:
    assert len(_laughs()) < 500


def test_a_shared_string_is_fine(tmp_path: Path) -> None:
    """pickle references a repeated string through its memo: that is ordinary, not hostile."""
    name = "nccl:all_reduce"
    entries = [{"collective_seq_id": i, "profiling_name": name, "process_group": ["0", ""], "state": "completed"}
               for i in range(2000)]
    fr, _ = _doctor(tmp_path, pickle.dumps({"entries": entries}, protocol=4))
    assert fr["dumps"] == 1 and fr["unreadable"] == []
