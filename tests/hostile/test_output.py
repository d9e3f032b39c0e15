"""Node output is data: escape sequences and emoji codes from a node never reach the terminal as such."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

# A stand-in for nvidia-smi (no GPU or driver here): it fails the way a wedged driver does, and
# its message tries to erase the line and print "ALL OK" over it, retitle the terminal, and
# smuggle rich markup and an emoji code.
FAKE_SMI = r"""#!/bin/bash
printf 'NVIDIA-SMI has failed \x1b[2K\x1b[1GALL OK \x1b]0;pwned\x07 :-1: [bold red]x[/bold red] \x07\x08\n'
exit 9
"""


def test_escape_sequences_from_a_node_are_dropped(ck, tmp_path: Path) -> None:
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / "nvidia-smi").write_text(FAKE_SMI)
    (fakebin / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{fakebin}:{os.environ['PATH']}"}
    result = ck.proc("preflight", "--site", "local", "--transport", "local", cwd=tmp_path, env=env)
    assert result.code == 1, result.err
    line = next(ln for ln in result.out.splitlines() if "gpu.present" in ln)
    assert "\x1b" not in result.out and "\x07" not in result.out and "\x08" not in result.out
    assert "NVIDIA-SMI has failed ALL OK" in line       # the words stay, as plain text
    assert ":-1: [bold red]x[/bold red]" in line        # no emoji, no markup
    as_json = ck.proc("preflight", "--site", "local", "--transport", "local", "--json", cwd=tmp_path, env=env)
    # --json keeps the node's words as data: escaped by JSON, never raw bytes on the terminal
    assert as_json.code == 1 and "\x1b" not in as_json.out and "\\u001b[2K" in as_json.out


def test_json_output_is_valid_json_even_with_a_non_finite_float(capsys: pytest.CaptureFixture[str]) -> None:
    from clusterkit.cli.output import emit_json

    emit_json({"gemm_tflops": float("nan"), "figures": [float("inf"), 1.5], "nested": {"x": float("-inf")}})
    out = capsys.readouterr().out
    assert "NaN" not in out and "Infinity" not in out
    doc = json.loads(out)
    assert doc["gemm_tflops"] is None and doc["figures"] == [None, 1.5] and doc["nested"] == {"x": None}
