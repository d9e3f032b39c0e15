"""The job script writes its result and reason where clusterkit's Python reads them, both named by
clusterkit.jobfiles (tests/jobscript harness): renamed there, the script and the reader move together."""

from __future__ import annotations

import pytest

from clusterkit import jobfiles
from clusterkit.scheduler.results import read_result_file, result_file
from tests.jobscript.harness import JOB_ID


@pytest.mark.parametrize("ending", ["", ".x"])
def test_the_reader_finds_what_the_script_wrote(job, monkeypatch: pytest.MonkeyPatch, ending: str) -> None:
    for key in ("result", "reason"):
        renamed = jobfiles.JobFile("", f".{key}{ending}")
        monkeypatch.setitem(jobfiles.FILES, key, renamed)
        monkeypatch.setattr(jobfiles, key.upper(), renamed)
    j = job("--setup", "exit 5").start()
    assert j.wait() == 5, j.log()
    assert read_result_file(result_file(j.run_dir, JOB_ID)) == 5
    assert jobfiles.REASON.path(j.run_dir, JOB_ID).read_text() == "setup step 1 failed (exit 5)\n"
    left = sorted(p.name for p in j.run_dir.iterdir() if p.name.startswith(JOB_ID))
    assert left == sorted([f"{JOB_ID}.result{ending}", f"{JOB_ID}.reason{ending}"])
