"""``recheck_after_hang`` (the site's ``watch.recheck_after_hang``, or ``--set``): the job script
hands the supervisor the site file, the stage and the check's bound for the performance check after
a hang that names no node, where the job has recovery inside its allocation and is watched."""

from __future__ import annotations

from pathlib import Path

from tests.cli.launch_helpers import render
from tests.cli.test_straggler_replace import _site, _supervise_argv
from tests.conftest import assert_one_line_error

MULTI = ("--stage", "multi-node", "--nodes", "2")


def test_on_by_default_with_the_site_file_stage_and_bound(ck, tmp_path: Path) -> None:
    run_dir = render(ck, tmp_path / "on", "--site", "testbed", *MULTI)
    argv = _supervise_argv(run_dir)
    site = argv[argv.index("--hang-check-site") + 1]
    assert Path(site).name == "testbed.yaml"
    assert argv[argv.index("--hang-check-stage") + 1] == "multi-node"
    assert argv[argv.index("--hang-check-s") + 1] == "360"   # perf.timeout_s (300) + 60
    assert "the performance check (preflight" in (run_dir / "job.sbatch").read_text()


def test_set_and_the_sites_key_turn_it_off(ck, tmp_path: Path) -> None:
    off = _supervise_argv(render(ck, tmp_path / "set", "--site", "testbed", *MULTI,
                                 "--set", "recheck_after_hang=false"))
    assert "--hang-check-site" not in off
    site = str(_site(tmp_path, recheck_after_hang=False))
    assert "--hang-check-site" not in _supervise_argv(render(ck, tmp_path / "key", "--site", site, *MULTI))
    on = _supervise_argv(render(ck, tmp_path / "back", "--site", site, *MULTI, "--set", "recheck_after_hang=true"))
    assert "--hang-check-site" in on


def test_not_without_recovery_or_watching(ck, tmp_path: Path) -> None:
    assert "--hang-check-site" not in _supervise_argv(render(ck, tmp_path / "one", "--site", "testbed"))
    unwatched = render(ck, tmp_path / "nowatch", "--site", "testbed", *MULTI, "--set", "stall_floor_s=0")
    assert "--hang-check-site" not in _supervise_argv(unwatched)


def test_a_wrong_value_is_one_line(ck, tmp_path: Path) -> None:
    bad = ck("render", "--site", "testbed", "--set", "recheck_after_hang=maybe", "--out", str(tmp_path / "x"),
             "--", "python", "t.py")
    assert_one_line_error(bad, 2, "recheck_after_hang")
    site = _site(tmp_path, recheck_after_hang="yes please")
    bad = ck("render", "--site", str(site), "--out", str(tmp_path / "y"), "--", "python", "t.py")
    assert_one_line_error(bad, 2, "recheck_after_hang")
