"""hostfiles/ holds each example site's hostfile in every launcher dialect; kept in sync here.

Regenerate with ``python -m pytest tests/render --regen-golden``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.config.load import load_site
from tests.conftest import REPO, shared_site

HOSTFILES = REPO / "hostfiles"
SITES = ["testbed", "ib-h100", "roce-a100", "eth-nfs"]
DIALECT_LAUNCHERS = ["deepspeed", "horovod", "colossalai", "mpirun"]
CASES = [(s, la) for s in SITES for la in DIALECT_LAUNCHERS]
# each launcher's hostfile dialect: DeepSpeed, Horovod and Open MPI want slots, ColossalAI bare host names
LINE = {"deepspeed": "{host} slots={gpus}", "horovod": "{host} slots={gpus}", "colossalai": "{host}",
        "mpirun": "{host} slots={gpus}"}


@pytest.mark.parametrize("site,launcher", CASES, ids=[f"{s}-{la}" for s, la in CASES])
def test_hostfiles_in_sync(ck, tmp_path: Path, request: pytest.FixtureRequest, site: str, launcher: str) -> None:
    s = load_site(site)
    n = len(s.nodes.hosts)
    stage = "multi-node" if n <= 8 else "large-cluster"
    run_dir = tmp_path / "run"
    site_file = shared_site(tmp_path / "sites", site, tmp_path)   # every node reads the run directory
    result = ck("render", "--site", str(site_file), "--stage", stage, "--nodes", str(n), "--launcher", launcher,
                "--set", "container=false", "--set", "max_restarts=0", "--out", str(run_dir),
                "--", "python", "train.py")
    assert result.code == 0, result.err
    text = (run_dir / "hostfile").read_text()
    lines = text.splitlines()
    assert len(set(lines)) == len(lines) == n  # one line per node, none twice
    assert lines == [LINE[launcher].format(host=host, gpus=s.nodes.gpus_per_node) for host in s.nodes.hosts]
    target = HOSTFILES / site / f"{launcher}.hostfile"
    if request.config.getoption("--regen-golden"):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    assert target.read_text() == text, f"{target} is stale: regenerate with --regen-golden"
