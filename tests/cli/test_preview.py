"""``render`` is a preview: from a clone on a laptop it writes the run directory and warns about
what ``submit`` would refuse; without ``--out`` a run directory goes to the site's shared storage
when the current directory is not on it (jobs are submitted from a login node)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error


def _help_example(ck, command: str) -> list[str]:
    result = ck(command, "--help")
    assert result.code == 0, result.err
    lines = [line.strip() for line in result.out.splitlines() if line.strip().startswith(f"clusterkit {command} ")]
    assert lines, result.out
    return shlex.split(lines[0])[1:]


def test_render_help_example_works_from_a_clone(ck, tmp_path: Path) -> None:
    cwd = tmp_path   # a checkout on a laptop: not the site's shared storage
    argv = _help_example(ck, "render")
    assert "--site" in argv and "--nodes" in argv and "--out" in argv   # 4 nodes: shared storage needed
    result = ck(*argv, cwd=cwd)
    assert result.code == 0, result.err
    assert "shared storage" in result.err and "`submit` refuses this run directory" in result.err
    run_dirs = list((tmp_path / "runs").iterdir())
    assert len(run_dirs) == 1 and (run_dirs[0] / "job.sbatch").is_file()


def test_submit_of_that_example_is_refused_and_leaves_nothing(ck, tmp_path: Path) -> None:
    cwd = tmp_path
    argv = _help_example(ck, "render")
    result = ck("submit", *argv[1:argv.index("--")], "--skip-preflight", *argv[argv.index("--"):], cwd=cwd)
    assert_one_line_error(result, 2, "is not on ib-h100's shared storage", "submit from a login node")
    assert not (tmp_path / "runs").exists()


def test_plan_render_works_from_a_clone(ck, tmp_path: Path) -> None:
    cwd = tmp_path
    result = ck("plan", "--json", "--site", "ib-h100", "--model-params", "70B", "--render", "--", "python", "train.py",
                cwd=cwd)
    assert result.code == 0, result.err
    rendered = json.loads(result.out)["rendered"]
    assert rendered["nodes"] >= 2 and Path(rendered["run_dir"]).parent == tmp_path / "runs"
    assert any("shared storage" in w for w in rendered["warnings"])


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "shared-site.yaml"
    site.write_text("name: shared-site\nscheduler: {kind: slurm}\nnodes: {nodelist: 'n[1-4]', gpus_per_node: 8}\n"
                    f"storage:\n  - {{path: {tmp_path}/scratch, type: lustre}}\n")
    return site


def test_default_out_goes_to_the_users_shared_folder(ck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _site(tmp_path)
    monkeypatch.setenv("USER", "alice")
    (tmp_path / "scratch" / "alice").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    cwd = tmp_path / "work"
    result = ck("render", "--json", "--site", str(site), "--stage", "multi-node", "--", "python", "t.py", cwd=cwd)
    assert result.code == 0, result.err
    assert "shared storage" not in result.err
    where = Path(json.loads(result.out)["run_dir"])
    assert where.parent == tmp_path / "scratch" / "alice" / "clusterkit-runs" and not where.exists()
    assert not (tmp_path / "work" / "runs").exists()


def test_default_out_prefers_a_shared_home(ck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _site(tmp_path)
    home = tmp_path / "scratch" / "home" / "bob"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USER", "bob")
    (tmp_path / "scratch" / "bob").mkdir()
    cwd = tmp_path
    result = ck("render", "--json", "--site", str(site), "--stage", "multi-node", "--", "python", "t.py", cwd=cwd)
    assert result.code == 0, result.err
    assert Path(json.loads(result.out)["run_dir"]).parent == home / "clusterkit-runs"


def test_default_out_stays_in_a_shared_current_directory(ck, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    site = _site(tmp_path)
    monkeypatch.setenv("USER", "alice")
    (tmp_path / "scratch" / "alice").mkdir(parents=True)
    cwd = tmp_path / "scratch"
    result = ck("render", "--json", "--site", str(site), "--stage", "multi-node", "--", "python", "t.py", cwd=cwd)
    assert result.code == 0, result.err
    assert Path(json.loads(result.out)["run_dir"]).parent == tmp_path / "scratch" / "runs"
