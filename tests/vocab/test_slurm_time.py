"""Slurm time limits: one validator for the site's scheduler.time, stages.<name>.time and
``--set time=``, one parser for the plan's preemption-room check (clusterkit.vocab)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.vocab import SlurmTimeError, check_slurm_time, slurm_minutes, slurm_seconds
from tests.conftest import REPO, assert_one_line_error


def _site(tmp_path: Path, body: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\n{body}")
    return str(path)


def _render(ck, site: str, tmp_path: Path, *args: str):
    return ck("render", "--site", site, *args, "--out", str(tmp_path / "run"), "--", "python", "train.py")


def test_site_time_in_minutes_renders(ck, tmp_path: Path) -> None:
    # sbatch takes a bare number as minutes; the site check and the plan once disagreed on it
    site = _site(tmp_path, 'scheduler: {time: "1440"}\n')
    assert ck("sites", "validate", site).code == 0
    result = _render(ck, site, tmp_path)
    assert result.code == 0, result.err
    assert "#SBATCH --time=1440\n" in (tmp_path / "run" / "job.sbatch").read_text()


def test_stage_time_is_checked_with_file_and_line(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, "stages:\n  multi-node:\n    time: bogus\n")
    result = ck("sites", "validate", site)
    assert_one_line_error(result, 2, "s.yaml:5: stages.multi-node.time: 'bogus' is not a Slurm time")
    assert len(result.err.strip().splitlines()) == 1


def test_stage_time_is_used(ck, tmp_path: Path) -> None:
    site = _site(tmp_path, 'stages:\n  single-node:\n    time: "2-00"\n')
    result = _render(ck, site, tmp_path)
    assert result.code == 0, result.err
    assert "#SBATCH --time=2-00\n" in (tmp_path / "run" / "job.sbatch").read_text()


def test_set_time_in_minutes(ck, tmp_path: Path) -> None:
    result = _render(ck, "testbed", tmp_path, "--set", "time=1440")
    assert result.code == 0, result.err
    assert "#SBATCH --time=1440\n" in (tmp_path / "run" / "job.sbatch").read_text()


def test_set_time_not_a_time(ck, tmp_path: Path) -> None:
    result = _render(ck, "testbed", tmp_path, "--set", "time=abc")
    assert_one_line_error(result, 2, "--set time='abc'", "not a Slurm time")
    assert len(result.err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text, seconds", [("5", 300), ("1440", 86400), ("1:30", 90), ("02:00:00", 7200),
                                           ("1-0", 86400), ("1-2:03", 93780), ("1-02:03:04", 93784)])
def test_slurm_seconds(text: str, seconds: int) -> None:
    assert slurm_seconds(text) == seconds
    assert slurm_minutes(text) == seconds / 60
    assert check_slurm_time(text) == text


@pytest.mark.parametrize("text", ["", "abc", "1:2:3:4", "1-", "-5", "1:60x", "0", "00:00:00", "1.5", " 90",
                                  "01:00:00\n"])
def test_not_slurm_times(text: str) -> None:
    with pytest.raises(SlurmTimeError):
        check_slurm_time(text)
