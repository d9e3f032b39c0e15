"""Every ``--json`` document carries ``schema_version`` (in each object of a list that is the
document), so a script can tell which shape it reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """One ended local job with a log, in a records directory of its own."""
    from clusterkit.scheduler.records import JobRecord, RecordStore

    run = tmp_path / "run"
    run.mkdir()
    (run / "6100_0_log.out").write_text("step 1\nTraceback (most recent call last):\nValueError: loss is nan\n")
    RecordStore(root=tmp_path / "state" / "jobs").save(JobRecord(
        job_id="6100", scheduler="local", site="local", site_source="site_configs/local.yaml", stage="single-node",
        launcher="torchrun", job_name="ck-t", nnodes=1, world_size=1, command=["python", "t.py"], run_dir=str(run),
        script=str(run / "job.sh"), submitted_at="2026-01-01T00:00:00.000000Z", host="login1", plan={},
        state="FAILED", exit_code=1))
    return {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")}


COMMANDS = [
    ("plan", "--site", "ib-h100", "--model-params", "7B", "--json"),
    ("render", "--site", "local", "--out", "{tmp}/r1", "--json", "--", "python", "t.py"),
    ("submit", "--site", "local", "--out", "{tmp}/r2", "--dry-run", "--no-snapshot", "--json", "--", "python", "t.py"),
    ("preflight", "--site", "local", "--json"),
    ("sites", "list", "--json"),
    ("sites", "show", "local", "--json"),
    ("sites", "validate", "site_configs/local.yaml", "site_configs/_slurm-defaults.yaml", "--json"),
    ("status", "--json"),
    ("status", "--all", "--json"),
    ("status", "6100", "--json"),
    ("logs", "6100", "--json"),
    ("cancel", "6100", "--json"),
    ("cancel", "6100", "local:6100", "--json"),
    ("doctor", "6100", "--json"),
    ("doctor", "--logs", "{tmp}/run", "--json"),
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_every_json_document_has_a_schema_version(ck, tmp_path: Path, env: dict[str, str],
                                                  args: tuple[str, ...]) -> None:
    res = ck(*(a.replace("{tmp}", str(tmp_path)) for a in args), cwd=REPO, env=env)
    assert res.code in (0, 1), res  # 1: preflight finds no GPU here, doctor a failure
    doc = json.loads(res.out)
    objects = doc if isinstance(doc, list) else [doc]
    assert objects and all(o["schema_version"] == 2 for o in objects), doc
