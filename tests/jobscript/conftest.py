from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.jobscript.harness import RANK, Job


def site_file(tmp_path: Path, **changes: object) -> Path:
    """The testbed site with ``changes`` (dotted keys), as a site file in ``tmp_path``."""
    data = yaml.safe_load((REPO / "site_configs" / "testbed.yaml").read_text())
    data["name"] = "jobsite"
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    path = tmp_path / "jobsite.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def job(ck, tmp_path: Path) -> Iterator[Callable[..., Job]]:
    """``job(*render_args, nodes=2, gpus=1, site=..., stage=..., launcher="srun", restarts=0, **env)``:
    render a job whose ranks are rank stand-ins, and a :class:`Job` to run it; whatever it leaves
    running is killed after the test."""
    made: list[Job] = []

    def make(*args: str, nodes: int = 2, gpus: int = 1, site: str = "testbed", stage: str = "multi-node",
             launcher: str = "srun", restarts: int = 0, **env: str) -> Job:
        run_dir = tmp_path / f"run{len(made)}"
        result = ck("render", "--site", site, "--stage", stage, "--nodes", str(nodes), "--gpus-per-node",
                    str(gpus), "--launcher", launcher, *args, "--out", str(run_dir), "--", str(RANK))
        assert result.code == 0, result.err
        j = Job(run_dir, tmp_path / f"work{len(made)}", nodes=nodes, restarts=restarts, **env)
        made.append(j)
        return j

    yield make
    for j in made:
        j.kill()
