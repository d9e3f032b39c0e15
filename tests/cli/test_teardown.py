"""``--teardown CMD`` (the site's ``job.teardown``, a stage's ``stages.<stage>.job.teardown``): the
supervisor's steps after the training, in order (site, stage, then the job's), handed over whole
(a step that starts with ``-`` stays a step); a site's own supervisor template that cannot run them
is refused; ``status`` shows each step's status apart from the training's.  How they run is
tests/jobscript/test_teardown.py."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from clusterkit.scheduler.records import JobRecord, RecordStore
from clusterkit.scheduler.results import read_teardown_file
from clusterkit.supervise.__main__ import parse
from tests.conftest import REPO, assert_one_line_error


def _site(tmp_path: Path, body: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\n{body}")
    return str(path)


def _supervisor_argv(script: str) -> list[str]:
    line = next(x for x in script.splitlines() if x.startswith('exec "$ck_python" -m clusterkit.supervise'))
    return [w.replace("$ck_launch_mode", "step") for w in shlex.split(line)[4:]]


def test_site_then_stage_then_job_reach_the_supervisor_whole(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, "job:\n  teardown: ['echo site']\nstages:\n  multi-node:\n    job:\n"
                           "      teardown: ['echo stage']\n")
    out = tmp_path / "run"
    result = ck("render", "--site", site, "--stage", "multi-node", "--nodes", "2", "--teardown", "-x is mine",
                "--teardown", "cp -r out \"$HOME/keep\"", "--out", str(out), "--", "python", "train.py")
    assert result.code == 0, result.err
    argv = _supervisor_argv((out / "job.sbatch").read_text())
    spec = parse(argv, {"CK_RUN_DIR": str(out), "CK_JOB_ID": "1"})
    assert spec.teardown == ("echo site", "echo stage", "-x is mine", 'cp -r out "$HOME/keep"')
    assert json.loads((out / "plan.json").read_text())["job"]["teardown"] == list(spec.teardown)


def test_no_teardown_no_argument(ck, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert ck("render", "--site", "testbed", "--out", str(out), "--", "python", "train.py").code == 0
    assert "--teardown" not in (out / "job.sbatch").read_text()


def test_a_site_supervisor_template_without_teardown_is_refused(ck, tmp_path: Path) -> None:
    tdir = tmp_path / "tpl"
    tdir.mkdir(mode=0o755)
    text = (REPO / "templates" / "job-supervise.j2").read_text().replace("{{ teardown_args }}", "")
    (tdir / "job-supervise.j2").write_text(text)
    site = _site(tmp_path, f"templates: {tdir}\n")
    result = ck("render", "--site", site, "--teardown", "true", "--out", str(tmp_path / "run"), "--", "python", "t.py")
    assert_one_line_error(result, 2, "--teardown", "the job's teardown steps would not run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text,steps", [("1 0\n2 3\n", [(1, 0), (2, 3)]), ("", []), ("2 0\n", []),
                                        ("1 0\n1 0\n", []), ("1 999\n", []), ("1 0; rm\n", []),
                                        ("1 0\n" * 101, [])])
def test_the_teardown_file_is_read_as_data(tmp_path: Path, text: str, steps: list) -> None:
    (tmp_path / "7.teardown").write_text(text)
    assert read_teardown_file(tmp_path, "7") == steps


def test_status_shows_each_steps_status_apart(ck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path / "state"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "601.result").write_text("0\n")
    (run / "601.teardown").write_text("1 0\n2 3\n")
    RecordStore().save(JobRecord(job_id="601", scheduler="local", site="local", site_source="local.yaml",
                                 stage="single-node", launcher="torchrun", job_name="ck-t", nnodes=1, world_size=1,
                                 command=["python", "t.py"], run_dir=str(run), script=str(run / "job.sh"),
                                 submitted_at="2026-12-06T06:00:00.000000Z", host="login1", plan={}))
    res = ck("status", "601")
    assert res.code == 0, res
    assert res.out.splitlines()[0] == "job 601 COMPLETED, exit code 0"
    assert "  teardown: step 1 status 0, step 2 status 3\n" in res.out
    doc = json.loads(ck("status", "601", "--json").out)
    assert doc["teardown"] == [{"step": 1, "status": 0}, {"step": 2, "status": 3}] and doc["exit_code"] == 0
