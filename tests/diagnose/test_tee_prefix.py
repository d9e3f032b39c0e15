"""torchrun's ``--tee`` prefix (``[rank<N>]: ``, clusterkit's template) stands before torch's own
``[rank<N>]:`` on a rank's uncaught exception: doctor reads the line as torch wrote it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clusterkit.diagnose import lines

TEE = "[rank1]: "    # what torchrun --tee adds to each console line of global rank 1


def test_both_prefixes_are_stripped_and_a_single_one_as_before() -> None:
    assert lines.strip_prefix(TEE + "[rank1]: KeyError: 'lr'") == " KeyError: 'lr'"
    assert lines.strip_prefix("[rank1]: KeyError: 'lr'") == " KeyError: 'lr'"
    assert lines.strip_prefix(TEE + "step 3 loss 0.5") == " step 3 loss 0.5"
    assert lines.strip_prefix("[default0]:[rank1]:[E1206 18:27:38.250 ProcessGroupNCCL.cpp:616] x") == \
        "[E1206 18:27:38.250 ProcessGroupNCCL.cpp:616] x"


def test_doctor_names_the_exception_under_both_prefixes(ck: Any, tmp_path: Path) -> None:
    log = tmp_path / "77.r0.node2.out"
    log.write_text("".join(TEE + line + "\n" for line in (
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/srv/train.py", line 116, in <module>',
        "[rank1]:     lr = cfg['lr']",
        "[rank1]: KeyError: 'lr'",
    )))
    result = ck("doctor", "--logs", str(log))
    assert result.code == 1, result.err     # a failure found
    first = result.out.splitlines()[0]
    assert first == "user-code: the training code raised an exception: KeyError: 'lr'", result.out
    assert "rank 1" in result.out.splitlines()[1]
