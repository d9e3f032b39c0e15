"""The job's own additions (``job:`` in the site, ``stages.<stage>.job``, ``--env``, ``--setup``,
...): how they add up, and that they reach plan.json as given.

Order: the site's ``job:``, then its ``stages.<stage>.job``, then the job's own flags
(``--env-file`` lines, then ``--env``); for ``env`` the last value of a name wins; lists add up
in that order; ``venv``/``conda`` take the precedence rule (flag, stage, site).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from clusterkit.api import job_request
from clusterkit.config.load import load_site
from clusterkit.errors import InputError
from clusterkit.job.request import resolve
from tests.conftest import REPO, assert_one_line_error


def layered_site(tmp_path: Path) -> Path:
    """ib-h100 with a ``job:`` section and a ``stages.single-node.job`` on top of it."""
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump({
        "extends": str(REPO / "site_configs" / "ib-h100.yaml"),
        "job": {"env": {"HF_HOME": "/site/hf", "WANDB_MODE": "offline", "TMPDIR": "/site/tmp"},
                "setup": ["echo site-setup"], "node_setup": ["echo site-node"], "srun_args": ["--label"],
                "launcher_args": ["--tee=3"], "venv": "/site/venv", "modules": ["site-mod"]},
        "stages": {"single-node": {"job": {"env": {"WANDB_MODE": "online", "STAGE_ONLY": "1"},
                                           "setup": ["echo stage-setup"], "venv": "/stage/venv",
                                           "modules": ["stage-mod"]}},
                   "multi-node": {"job": {"env": {"MULTI": "1"}}}},
    }))
    return path


def plan_job(ck, tmp_path: Path, *flags: str, site: Path | None = None, stage: str = "single-node") -> dict:
    out = tmp_path / "run"
    result = ck("render", "--site", str(site or layered_site(tmp_path)), "--stage", stage, "--out", str(out),
                "--set", "container=false", *flags, "--", "python", "train.py")
    assert result.code == 0, result.err
    return json.loads((out / "plan.json").read_text())["job"]


def env_of(job: dict) -> dict[str, tuple[str, str]]:
    return {e["name"]: (e["value"], e["origin"]) for e in job["env"]}


def test_site_then_stage_then_job(ck, tmp_path: Path) -> None:
    envfile = tmp_path / "vars.env"
    envfile.write_text("# team defaults\nTMPDIR=/file/tmp\n\nFROM_FILE=a=b\nHF_HOME=/file/hf\n")
    job = plan_job(ck, tmp_path, "--env-file", str(envfile), "--env", "HF_HOME=/job/hf",
                   "--setup", "echo job-setup-1", "--setup", "echo job-setup-2", "--node-setup", "echo job-node",
                   "--srun-arg=--cpu-bind=none", "--launcher-arg", "--max-restarts=0", "--module", "job-mod",
                   "--sbatch", "constraint=h100", "--sbatch", "exclusive")
    env = env_of(job)
    assert env["HF_HOME"] == ("/job/hf", "--env")                           # --env beats file, stage, site
    assert env["TMPDIR"] == ("/file/tmp", f"--env-file {envfile}:2")         # file beats site
    assert env["FROM_FILE"] == ("a=b", f"--env-file {envfile}:4")            # a value may hold '='
    assert env["WANDB_MODE"] == ("online", "site stages.single-node.job.env")  # stage beats site
    assert env["STAGE_ONLY"] == ("1", "site stages.single-node.job.env")
    assert "MULTI" not in env                                               # another stage's entry
    assert [e["name"] for e in job["env"]].count("HF_HOME") == 1
    assert job["setup"] == ["echo site-setup", "echo stage-setup", "echo job-setup-1", "echo job-setup-2"]
    assert job["node_setup"] == ["echo site-node", "echo job-node"]
    assert job["srun_args"] == ["--label", "--cpu-bind=none"]
    assert job["launcher_args"] == ["--tee=3", "--max-restarts=0"]
    assert job["modules"] == ["site-mod", "stage-mod", "job-mod"]
    assert job["venv"] == "/stage/venv" and job["conda"] is None
    assert job["sbatch"] == [["constraint", "h100"], ["exclusive", None]]


def test_venv_flag_wins_and_other_stage_sees_its_own(ck, tmp_path: Path) -> None:
    assert plan_job(ck, tmp_path, "--venv", "/job/venv")["venv"] == "/job/venv"
    site = load_site(str(layered_site(tmp_path)))
    r = resolve(site, job_request(["python", "t.py"], stage="multi-node", conda="train"), allocates=True)
    assert r.job.venv == "/site/venv" and r.job.conda == "train"
    assert {e.name: e.value for e in r.job.env} == {"HF_HOME": "/site/hf", "WANDB_MODE": "offline",
                                                   "TMPDIR": "/site/tmp", "MULTI": "1"}
    assert r.job.setup == ("echo site-setup",)


def test_no_job_section_means_nothing_added(ck, tmp_path: Path) -> None:
    job = plan_job(ck, tmp_path, site=REPO / "site_configs" / "ib-h100.yaml")
    assert job == {"env": [], "setup": [], "node_setup": [], "teardown": [], "srun_args": [], "launcher_args": [],
                   "venv": None, "conda": None, "modules": [], "sbatch": []}


def test_api_takes_a_mapping_or_pairs_and_files_before_pairs(tmp_path: Path) -> None:
    envfile = tmp_path / "a.env"
    envfile.write_text("A=file\nB=file\n")
    r = job_request(["python", "t.py"], env={"A": "mapping"}, env_file=envfile)
    assert [(e.name, e.value) for e in r.job.env] == [("A", "file"), ("B", "file"), ("A", "mapping")]
    site = load_site("ib-h100")
    assert {e.name: e.value for e in resolve(site, r, allocates=True).job.env} == {"A": "mapping", "B": "file"}
    r = job_request(["python", "t.py"], env=["X=1", "X=2"], sbatch={"constraint": "a100", "exclusive": True,
                                                                   "mail-type": False})
    assert {e.name: e.value for e in resolve(site, r, allocates=True).job.env} == {"X": "2"}
    assert r.job.sbatch == (("constraint", "a100"), ("exclusive", None))


@pytest.mark.parametrize("kwargs,field", [
    ({"env": ["NOEQUALS"]}, "env"),
    ({"env": {"A B": "1"}}, "env"),
    ({"env": ["A=x\0y"]}, "env"),
    ({"setup": "echo one string"}, "setup"),
    ({"venv": ""}, "venv"),
    ({"sbatch": ["--Bad Key"]}, "sbatch"),
])
def test_api_errors_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InputError) as err:
        job_request(["python", "t.py"], **kwargs)
    assert err.value.field == field


@pytest.mark.parametrize("text,line,needle", [
    ("A=1\nexport B=2\n", 2, "without 'export'"),
    ("A=1\n# fine\n\nB\n", 4, "is not KEY=VALUE"),
    ('Q="quoted"\n', 1, "taken literally"),
    ("1X=2\n", 1, "not an environment variable name"),
])
def test_env_file_errors_name_file_and_line(ck, tmp_path: Path, text: str, line: int, needle: str) -> None:
    envfile = tmp_path / "bad.env"
    envfile.write_text(text)
    result = ck("render", "--site", "ib-h100", "--out", str(tmp_path / "run"), "--env-file", str(envfile),
                "--", "python", "train.py")
    assert_one_line_error(result, 2, f"--env-file {envfile}:{line}:", needle)
    assert not (tmp_path / "run").exists()


def test_env_file_missing_or_not_a_file(ck, tmp_path: Path) -> None:
    result = ck("render", "--site", "ib-h100", "--out", str(tmp_path / "run"), "--env-file", str(tmp_path),
                "--", "python", "train.py")
    assert_one_line_error(result, 2, f"--env-file {tmp_path}: cannot read it")
    result = ck("render", "--site", "ib-h100", "--out", str(tmp_path / "run"), "--env-file",
                str(tmp_path / "absent.env"), "--", "python", "train.py")
    assert_one_line_error(result, 2, "--env-file", "absent.env: cannot read it")


def test_site_job_section_errors_carry_file_and_line(ck, tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(f"extends: {REPO / 'site_configs' / 'ib-h100.yaml'}\njob:\n  env:\n    1BAD: x\n")
    result = ck("render", "--site", str(path), "--out", str(tmp_path / "run"), "--", "python", "train.py")
    assert_one_line_error(result, 2, "site.yaml:", "is not an environment variable name")
    path.write_text(f"extends: {REPO / 'site_configs' / 'ib-h100.yaml'}\nstages:\n  multi-node:\n    job:\n"
                    "      setupp: [x]\n")
    result = ck("render", "--site", str(path), "--out", str(tmp_path / "run"), "--", "python", "train.py")
    assert_one_line_error(result, 2, "site.yaml:5", "setupp")
