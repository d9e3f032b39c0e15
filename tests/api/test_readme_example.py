"""The README's "From Python" example, run as it is written there, on the local site.

The code is read from README.md at test time, so the README cannot drift from what runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def readme_example() -> str:
    """The first ```python block of the README's "## From Python" section."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## From Python\n", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"^```python\n(.*?)^```$", section, re.S | re.M)
    assert m, "README: no ```python block under '## From Python'"
    return m.group(1)


def test_the_example_is_the_readmes_and_uses_the_local_site() -> None:
    code = readme_example()
    compile(code, "README.md", "exec")
    assert 'Site.load("local")' in code and "site.submit(" in code and "job.wait(" in code


@pytest.mark.torch
def test_readme_example_runs_on_the_local_site(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # the local site's launcher is torchrun
    shutil.copytree(REPO / "examples", tmp_path / "examples")   # a copy: a link out of the tree is not snapshotted
    (tmp_path / "example.py").write_text(readme_example(), encoding="utf-8")
    env = dict(os.environ, CLUSTERKIT_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "#!/bin/bash"
    job_id, state, status = lines[1].split()
    assert (state, status) == ("COMPLETED", "0")
    assert "allreduce OK: world_size=2 sum=3 expected=3 ranks_ok=2/2" in lines[2]
    assert lines[3] == "settings.zero_stag"
    # the job really ran through the record store and its own run directory
    runs = [d for d in (tmp_path / "runs").iterdir() if d.name != "checkpoints"]   # beside them: the run's
    assert len(runs) == 1  # the submitted job's: a dry run without out writes nothing
    assert (tmp_path / "state" / "jobs").is_dir()
    assert any((r / f"{job_id}.result").read_text() == "0\n" for r in runs if (r / f"{job_id}.result").exists())
