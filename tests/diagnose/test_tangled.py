"""Ranks that share one stream and raise at once write their exception lines in each other's
pieces; doctor reads the line one rank wrote (pytorch/pytorch#73465 and #56583 describe the
interleaving).  The first line below is what this project's CI captured from two local torchrun
ranks (torch 2.14.1, Python 3.11.7) raising the same KeyError in the same microsecond."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from clusterkit.diagnose.tangled import untangle

CAPTURED = "KeyErrorKeyError: : 'missing_key''missing_key'"


@pytest.mark.parametrize("line, want", [
    (CAPTURED, ("KeyError: 'missing_key'", 2)),
    # three ranks, Python's pieces (type, ": ", message) in another order
    ("RuntimeErrorRuntimeErrorRuntimeError: : : CUDA errorCUDA error: out of memory: out of memory"
     "CUDA error: out of memory", ("RuntimeError: CUDA error: out of memory", 3)),
    # a line one rank wrote whole is left alone, and so are separators and short repeats
    ("KeyError: 'missing_key'", ("KeyError: 'missing_key'", 1)),
    ("ab" * 3, ("ab" * 3, 1)),
    # the same characters twice but no shuffle of one line: left alone
    ("ValueError: abValueError: ba", ("ValueError: abValueError: ba", 1)),
])
def test_a_line_of_identical_copies_is_untangled_and_others_are_kept(line: str, want: tuple[str, int]) -> None:
    assert untangle(line) == want


def test_python_s_pieces_from_up_to_four_ranks_in_any_order_untangle() -> None:
    pieces = ["torch.OutOfMemoryError", ": ", "CUDA out of memory. Tried to allocate 20.00 MiB"]
    whole = "".join(pieces)
    rng = random.Random(7)
    for k in (2, 3, 4):
        for _ in range(20):
            left = [list(pieces) for _ in range(k)]
            line = ""
            while any(left):
                line += left[rng.choice([i for i in range(k) if left[i]])].pop(0)
            assert untangle(line) == (whole, k), line


def test_doctor_names_the_exception_one_rank_wrote_not_the_tangle(ck, tmp_path: Path) -> None:
    log = tmp_path / "logs" / "9100.r0.node3.out"
    log.parent.mkdir()
    log.write_text("Traceback (most recent call last):\nTraceback (most recent call last):\n"
                   '  File "bad.py", line 4, in <module>\n  File "bad.py", line 4, in <module>\n'
                   f"{CAPTURED}\n")
    r = ck("doctor", "--logs", str(log), "--json")
    assert "Traceback" not in r.err, r.err
    verdict = json.loads(r.out)["verdict"]
    assert verdict["category"] == "user-code"
    assert verdict["evidence"][0].endswith(":5: KeyError: 'missing_key'"), verdict["evidence"]
