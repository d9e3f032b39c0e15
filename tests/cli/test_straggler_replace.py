"""``straggler_replace`` (the site's ``watch.straggler_replace``, or ``--set``): the job script hands
the supervisor the straggler ratio to replace by, where the job has recovery inside its allocation,
and says why not where it has none."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from tests.cli.launch_helpers import render
from tests.conftest import REPO, assert_one_line_error


def _supervise_argv(run_dir: Path) -> list[str]:
    line = next(ln for ln in (run_dir / "job.sbatch").read_text().splitlines() if "-m clusterkit.supervise" in ln)
    return shlex.split(line)


def _site(tmp_path: Path, **watch: object) -> Path:
    data = yaml.safe_load((REPO / "site_configs" / "testbed.yaml").read_text())
    data["name"] = "testbed-replace"
    data["watch"] = watch
    path = tmp_path / "testbed-replace.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_off_by_default_and_on_by_set_with_the_jobs_ratio(ck, tmp_path: Path) -> None:
    multi = ("--site", "testbed", "--stage", "multi-node", "--nodes", "2")
    off = _supervise_argv(render(ck, tmp_path / "off", *multi))
    assert "--straggler-replace" not in off
    on = _supervise_argv(render(ck, tmp_path / "on", *multi, "--set", "straggler_replace=true",
                                "--set", "straggler_ratio=2.5"))
    assert on[on.index("--straggler-replace") + 1] == "2.5"
    assert "is replaced at the next checkpoint save" in (tmp_path / "on" / "job.sbatch").read_text()


def test_the_sites_key_turns_it_on_and_set_turns_it_off(ck, tmp_path: Path) -> None:
    site = str(_site(tmp_path, straggler_replace=True))
    multi = ("--site", site, "--stage", "multi-node", "--nodes", "2")
    on = _supervise_argv(render(ck, tmp_path / "on", *multi))
    assert on[on.index("--straggler-replace") + 1] == "1.5"
    off = _supervise_argv(render(ck, tmp_path / "off", *multi, "--set", "straggler_replace=false"))
    assert "--straggler-replace" not in off


def test_a_job_without_recovery_says_its_stragglers_are_not_replaced(ck, tmp_path: Path) -> None:
    run_dir = render(ck, tmp_path / "one", "--site", "testbed", "--set", "straggler_replace=true")
    assert "--straggler-replace" not in _supervise_argv(run_dir)
    assert "never replaced here: this job has no recovery inside its allocation" in (run_dir / "job.sbatch").read_text()


def test_a_wrong_value_is_one_line(ck, tmp_path: Path) -> None:
    bad = ck("render", "--site", "testbed", "--set", "straggler_replace=maybe", "--out", str(tmp_path / "x"),
             "--", "python", "t.py")
    assert_one_line_error(bad, 2, "straggler_replace")
    site = _site(tmp_path, straggler_replace="yes please")
    bad = ck("render", "--site", str(site), "--out", str(tmp_path / "y"), "--", "python", "t.py")
    assert_one_line_error(bad, 2, "straggler_replace")
