"""The Python API (``from clusterkit import Site, Job, ...``): its errors and their field paths,
the same job script as the CLI, cheap imports, types a user's script is checked against."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clusterkit import (
    ClusterkitError,
    ConfigError,
    InputError,
    Job,
    PlanError,
    RecordError,
    RunDirError,
    Site,
    jobs,
)
from tests.conftest import CLI, REPO

HERE = Path(__file__).resolve().parent

# -- errors: one family, each naming the field it is about ------------------------------------

AT_PLAN = [  # raised by site.plan(...): the inputs alone are wrong
    ({"settings": {"zero_stag": 3}}, InputError, "settings.zero_stag", "settings.zero_stag: unknown setting"),
    ({"settings": {"zero_stage": 5}}, InputError, "settings.zero_stage",
     "settings.zero_stage=5: Input should be less than or equal to 3"),
    ({"settings": {"time": "abc"}}, InputError, "settings.time", "settings.time='abc': "),
    ({"stage": "huge"}, InputError, "stage", "stage='huge': choose one of single-node"),
    ({"launcher": "Bad Name"}, InputError, "launcher", "launcher='Bad Name': choose one of"),
    ({"nodes": 0}, InputError, "nodes", "nodes=0: must be a whole number"),
    ({"exclude": "node["}, InputError, "exclude", "exclude: "),
]
AT_RENDER = [  # raised when the job is planned on the site
    ({"stage": "large-cluster", "nodes": 16}, PlanError, "nodes", "nodes=16 but site testbed has only 4 nodes"),
    ({"gpus_per_node": 99}, PlanError, "gpus_per_node", "gpus_per_node=99: site testbed nodes have 8 GPUs"),
    ({"job_name": "bad name"}, PlanError, "job_name", "job_name='bad name': use 1-64"),
    ({"launcher": "torchrun", "settings": {"zero_stage": 3}}, PlanError, "settings.zero_stage",
     "settings.zero_stage: the torchrun launcher does not use it; it is used by deepspeed"),
    ({"settings": {"container": True}}, PlanError, "settings.container",
     "settings.container=true but site testbed configures no software.container"),
]


@pytest.mark.parametrize(("kwargs", "kind", "field", "text"), AT_PLAN, ids=[c[2] for c in AT_PLAN])
def test_bad_inputs_are_refused_at_their_field_when_planned(kwargs: dict[str, Any], kind: type, field: str,
                                                            text: str) -> None:
    with pytest.raises(kind) as err:
        Site.load("testbed").plan(["python", "train.py"], **kwargs)
    assert isinstance(err.value, ClusterkitError) and err.value.field == field
    assert str(err.value).startswith(text), str(err.value)
    assert "--" not in str(err.value)  # the API's words, not the command line's


@pytest.mark.parametrize(("kwargs", "kind", "field", "text"), AT_RENDER, ids=[c[2] for c in AT_RENDER])
def test_impossible_plans_are_refused_at_their_field_and_leave_nothing(tmp_path: Path, kwargs: dict[str, Any],
                                                                       kind: type, field: str, text: str) -> None:
    plan = Site.load("testbed").plan(["python", "train.py"], **kwargs)
    with pytest.raises(kind) as err:
        plan.render(tmp_path / "run")
    assert err.value.field == field and str(err.value).startswith(text), str(err.value)
    assert "--" not in str(err.value)
    assert not (tmp_path / "run").exists()


def test_several_bad_settings_are_reported_together() -> None:
    with pytest.raises(InputError) as err:
        Site.load("testbed").plan(["python", "t.py"], settings={"zero_stage": 9, "micro_batch": 0})
    assert sorted(p.field for p in err.value.problems) == ["settings.micro_batch", "settings.zero_stage"]
    assert len(err.value.lines()) == 2


def test_command_must_be_a_list_of_words() -> None:
    site = Site.load("local")
    for bad in ("python train.py", [], [""], ["python", 3]):
        with pytest.raises(InputError) as err:
            site.plan(bad)  # type: ignore[arg-type]
        assert err.value.field == "command"


def test_run_directory_in_use_is_a_run_dir_error_at_out(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "keep.txt").write_text("mine\n")
    with pytest.raises(RunDirError) as err:
        Site.load("local").plan(["python", "t.py"]).render(tmp_path / "run")
    assert err.value.field == "out" and "already exists and is not empty" in str(err.value)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["keep.txt"]


def test_unknown_site_job_and_transport(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path / "state"))
    with pytest.raises(ConfigError, match="no site named 'no-such-site'"):
        Site.load("no-such-site")
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "site_configs" / "testbed.yaml").read_text() + "\nscheduler: {kind: slurm, time: soon}\n")
    with pytest.raises(ConfigError) as cfg:
        Site.load(bad)
    assert cfg.value.field is not None and cfg.value.field.startswith("scheduler")
    with pytest.raises(RecordError):
        Job.find("424242")
    with pytest.raises(InputError) as err:
        Site.load("local").preflight(transport="telnet")
    assert err.value.field == "transport"
    with pytest.raises(InputError) as err:
        jobs(0)
    assert err.value.field == "limit"


@pytest.mark.parametrize(("args", "line"), [
    (("--set", "zero_stag=3"),
     "clusterkit: error: --set zero_stag: unknown setting; did you mean zero_stage? valid settings: "),
    (("--set", "zero_stage=5"), "clusterkit: error: --set zero_stage='5': Input should be less than or equal to 3"),
    (("--gpus-per-node", "99"), "clusterkit: error: --gpus-per-node 99: site testbed nodes have 8 GPUs"),
    (("--job-name", "bad name"), "clusterkit: error: --job-name 'bad name': use 1-64 letters"),
    (("--exclude", "node["), "clusterkit: error: --exclude: "),
])
def test_the_cli_words_the_same_errors_with_its_options(ck: CLI, tmp_path: Path, args: tuple[str, ...],
                                                        line: str) -> None:
    res = ck("render", "--site", "testbed", *args, "--out", str(tmp_path / "run"), "--", "python", "t.py")
    assert res.code == 2 and len(res.lines) == 1 and res.lines[0].startswith(line), res.err


# -- one job script, whichever way it is asked for ---------------------------------------------

SAME_JOBS = [   # the live tree (no code snapshot): render takes none, and the dry run is compared with it
    ("testbed", ["--stage", "multi-node", "--nodes", "2", "--launcher", "deepspeed", "--set", "zero_stage=3",
                 "--set", "micro_batch=2", "--no-snapshot"],
     {"stage": "multi-node", "nodes": 2, "launcher": "deepspeed", "settings": {"zero_stage": 3, "micro_batch": 2},
      "snapshot": False}),
    ("testbed", ["--stage", "single-node", "--gpus-per-node", "4", "--launcher", "srun", "--exclude", "node[2-3]",
                 "--job-name", "same", "--debug", "--no-snapshot"],
     {"stage": "single-node", "gpus_per_node": 4, "launcher": "srun", "exclude": ["node2", "node3"],
      "job_name": "same", "debug": True, "snapshot": False}),
    ("local", ["--no-snapshot"], {"snapshot": False}),
]


@pytest.mark.parametrize(("site", "argv", "kwargs"), SAME_JOBS, ids=["deepspeed", "srun", "local"])
def test_api_and_cli_render_byte_identical_job_sbatch(ck: CLI, tmp_path: Path, site: str, argv: list[str],
                                                      kwargs: dict[str, Any]) -> None:
    out = tmp_path / "run"
    cmd = ["python", "train.py", "--lr", "3e-4"]
    via_api = Site.load(site).plan(cmd, **kwargs).render(out)
    api_files = {name: (out / name).read_bytes() for name in via_api.files}
    assert via_api.sbatch.encode() == api_files["job.sbatch"]
    assert Site.load(site).plan(cmd, **kwargs).dry_run(tmp_path / "dry") == via_api.sbatch.replace(
        str(out), str(tmp_path / "dry"))
    shutil.rmtree(out)
    res = ck("render", "--site", site, *argv, "--out", str(out), "--", *cmd)
    assert res.code == 0, res.err
    # job.sbatch records the command line that made it: the CLI's words, or the API's note
    words = ["clusterkit", "render", "--site", site, *argv, "--out", str(out), "--", *cmd]
    cli_line = f"# made by: {shlex.join(words)}\n"
    api_line = "# made by: the Python API (clusterkit.Site.plan)\n"
    assert api_line.encode() in api_files["job.sbatch"]
    api_files["job.sbatch"] = api_files["job.sbatch"].replace(api_line.encode(), cli_line.encode())
    assert {name: (out / name).read_bytes() for name in via_api.files} == api_files
    shutil.rmtree(out)
    res = ck("submit", "--dry-run", "--site", site, *argv, "--out", str(out), "--", *cmd)
    assert res.code == 0, res.err
    made = api_files["job.sbatch"].replace(b"made by: clusterkit render", b"made by: clusterkit submit --dry-run")
    assert res.out.encode() == made


@pytest.mark.torch
def test_a_job_submitted_through_the_api_and_the_cli_gets_the_same_script(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # the local site runs torchrun
    script = tmp_path / "job.py"
    script.write_text("import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], flush=True)\n")
    out = tmp_path / "run"
    env = dict(os.environ, CLUSTERKIT_STATE_DIR=str(tmp_path / "state"))
    api = subprocess.run([sys.executable, "-c", (
        "import sys; from clusterkit import Site\n"
        f"job = Site.load('local').submit(['python', {str(script)!r}], gpus_per_node=1, out={str(out)!r}, wait=True)\n"
        "r = job.wait(); print(job.id, r.state, r.exit_status)\n")], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=300)
    assert api.returncode == 0 and api.stdout.split()[1:] == ["COMPLETED", "0"], api.stdout + api.stderr
    sent_by_api = (out / "job.sbatch").read_bytes()
    assert b"rank 0 of 1" in b"".join(p.read_bytes() for p in out.glob("*.out"))
    shutil.rmtree(out)
    cli = subprocess.run([sys.executable, "-m", "clusterkit", "submit", "--site", "local", "--gpus-per-node", "1",
                          "--out", str(out), "--", "python", str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    words = ["clusterkit", "submit", "--site", "local", "--gpus-per-node", "1", "--out", str(out), "--", "python",
             str(script)]
    assert (out / "job.sbatch").read_bytes() == sent_by_api.replace(  # only the line recording who made it differs
        b"# made by: the Python API (clusterkit.Site.plan)\n", f"# made by: {shlex.join(words)}\n".encode())


# -- imports and types -------------------------------------------------------------------------

def test_import_clusterkit_is_cheap_and_the_api_is_loaded_on_first_use() -> None:
    code = ("import sys, clusterkit\n"
            "before = sorted(m for m in ('clusterkit.api', 'pydantic', 'jinja2') if m in sys.modules)\n"
            "from clusterkit import Site\n"
            "heavy = sorted(m for m in ('paramiko', 'submitit') if m in sys.modules)\n"
            "print(before, 'clusterkit.api' in sys.modules, heavy)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[] True []"


def test_every_public_name_has_a_docstring() -> None:
    import inspect

    import clusterkit
    from clusterkit import api

    for name in clusterkit.__all__:
        obj = getattr(clusterkit, name)
        if name != "__version__":
            assert inspect.getdoc(obj), name
    for name in api.__all__:
        obj = getattr(api, name)
        assert inspect.getdoc(obj), name
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                if not member.startswith("_") and (callable(value) or isinstance(value, property | classmethod)):
                    assert inspect.getdoc(getattr(obj, member)), f"{name}.{member}"
    with pytest.raises(AttributeError):
        _ = clusterkit.NoSuchName  # type: ignore[attr-defined]


def test_mypy_strict_passes_on_a_user_script(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    user = tmp_path / "user_script.py"
    shutil.copy(HERE / "user_script.py", user)
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir",
                           str(tmp_path / "cache"), str(user)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, MYPYPATH=""))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # and a wrong use is caught: the checks are real
    user.write_text(user.read_text() + "\nbad: int = Site.load('local').plan(['x']).dry_run()\n")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
                           str(user)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and 'Incompatible types in assignment (expression has type "str"' in proc.stdout


# -- the sites commands' calls ------------------------------------------------------------------

def test_site_files_through_the_api(ck: CLI, tmp_path: Path) -> None:
    from clusterkit.api import drift, sites

    names = {e.name for e in sites() if not e.shadowed}
    assert {"local", "testbed", "ib-h100"} <= names
    listed = ck("sites", "list", "--json")
    assert listed.code == 0 and {r["name"] for r in json.loads(listed.out) if not r["shadowed"]} == names
    site = Site.load_file(REPO / "site_configs" / "testbed.yaml")
    assert site.name == "testbed" and site.scheduler == "slurm" and site.to_dict()["name"] == "testbed"
    assert site.overridden_templates == [] and site.source.endswith("testbed.yaml")
    assert Site.schema()["title"] == "clusterkit site config"
    with pytest.raises(ConfigError):
        Site.load_file(tmp_path / "missing.yaml")
    with pytest.raises(InputError, match="name at least one SITE"):
        drift()
