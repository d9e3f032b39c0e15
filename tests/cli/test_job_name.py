"""``--job-name``: what Slurm takes, ':' included (issue 40), and nothing a shell or a path would
misread; the names made from it on disk (the run directory, the run name) carry '-' for ':'."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error


def test_a_job_name_with_a_colon_is_slurms_and_paths_get_a_dash(ck, tmp_path: Path) -> None:
    result = ck("render", "--site", "ib-h100", "--nodes", "2", "--job-name", "gpt:7b:run1", "--json",
                "--", "python", "train.py")
    assert result.code == 0, result.err
    got = json.loads(result.out)
    assert got["job_name"] == "gpt:7b:run1"
    assert Path(got["run_dir"]).name.startswith("gpt-7b-run1-"), got["run_dir"]
    script = got["job_sbatch"]
    assert "\n#SBATCH --job-name=gpt:7b:run1\n" in script
    assert "export CK_RUN_NAME=gpt-7b-run1-\"$CK_JOB_ID\"" in script
    # written: the run directory named by --out is the user's own, ':' or not; the container site mounts it
    out = tmp_path / "named"
    written = ck("render", "--site", "ib-h100", "--nodes", "2", "--job-name", "a:b", "--out", str(out),
                 "--", "python", "train.py")
    assert written.code == 0, written.err
    assert "#SBATCH --job-name=a:b\n" in (out / "job.sbatch").read_text()


@pytest.mark.parametrize("name", ["a b", "a;b", "a/b", ":a", "a$(id)", "a'b", "x" * 65, "a\nb"])
def test_what_a_shell_or_path_would_misread_is_still_refused(ck, tmp_path: Path, name: str) -> None:
    result = ck("render", "--site", "ib-h100", "--job-name", name, "--out", str(tmp_path / "run"),
                "--", "python", "train.py")
    assert_one_line_error(result, 2, "clusterkit: error: --job-name", "use 1-64 letters, digits, '.', '_', '+', "
                          "':' or '-'")
    assert not (tmp_path / "run").exists()
