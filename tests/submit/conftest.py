"""What the local-site submit tests share: the CLI as a process with its own job records."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import CLI, REPO


@pytest.fixture
def local_ck(ck: CLI, tmp_path: Path) -> CLI:
    """``ck`` as a process, from the checkout, with its job records under tmp_path/state."""
    return ck.bind(process=True, cwd=REPO, timeout=180, env={"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")})


def submitted_job_id(out: str) -> str:
    """The job id in submit's "Submitted job N" line."""
    m = re.search(r"Submitted job (\d+)", out)
    assert m, out
    return m.group(1)
