"""``submit --after / --chain / --run-name`` and ``--set stop_signal / requeue_by``: what they render
and how bad input is refused (one line, exit 2, nothing written).  The jobs themselves run on the
Slurm testbed (tests/slurm/test_chain.py, tests/slurm/test_lightning_requeue.py)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.render.test_golden import normalise

GOLDEN = REPO / "tests" / "golden" / "long-run" / "job.sbatch"
LONG_RUN = ("--stage", "multi-node", "--nodes", "2", "--launcher", "srun", "--set", "stop_signal=USR1",
            "--set", "requeue_by=framework", "--run-name", "lm-7b", "--after", "1234:any", "--chain", "3")


def _dry_run(ck, tmp_path: Path, *args: str, site: str = "testbed"):
    return ck("submit", "--dry-run", "--no-snapshot",
              "--site", site, *args, "--out", str(tmp_path / "run"), "--", "python",
              "train.py")


def test_a_chain_member_with_the_frameworks_signal_renders_as_the_golden_script(
        ck, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    result = _dry_run(ck, tmp_path, "--job-name", "golden", *LONG_RUN)
    assert result.code == 0, result.err
    assert "this is member 1 of 3; members 2-3 are the same job" in result.err
    text = normalise(result.out, tmp_path / "run")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("# made by:")) + "\n"
    if request.config.getoption("--regen-golden"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    expected = GOLDEN.read_text()
    assert text == expected, "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True)))
    for line in ("#SBATCH --dependency=afterany:1234", "#SBATCH --kill-on-invalid-dep=yes",
                 "export CK_RUN_NAME=lm-7b", "--stop-signal USR1 --requeue-by framework",
                 'ck_chain_ids="$CK_RUN_DIR/chain.ids"', "scancel --signal=USR1"):
        assert line in text, line


def test_the_default_run_name_is_the_job_name_and_its_first_job_id(ck, tmp_path: Path) -> None:
    result = _dry_run(ck, tmp_path, "--job-name", "lm")
    assert result.code == 0, result.err
    assert 'export CK_RUN_NAME=lm-"$CK_JOB_ID"' in result.out
    assert ('ck_checkpoints=/tmp/checkpoints\n'
            'export CK_CHECKPOINT_DIR="$ck_checkpoints/$ck_user/$CK_RUN_NAME"') in result.out
    assert "--dependency" not in result.out and "ck_chain_ids" not in result.out
    assert " --stop-signal TERM --requeue-by clusterkit -- " in result.out


def test_after_defaults_to_ok(ck, tmp_path: Path) -> None:
    result = _dry_run(ck, tmp_path, "--after", "4321")
    assert result.code == 0, result.err
    assert "#SBATCH --dependency=afterok:4321\n" in result.out


@pytest.mark.parametrize("args,site,message", [
    (("--run-name", "../other"), "testbed",
     "--run-name '../other': use 1-128 letters, digits, '.', '_', '+' or '-', starting with a letter or digit"),
    (("--run-name", "a b"), "testbed", "--run-name 'a b': use 1-128 letters"),
    (("--after", "abc"), "testbed", "--after 'abc': expected JOB[:ok|any]"),
    (("--after", "12:maybe"), "testbed", "--after '12:maybe': unknown condition 'maybe'"),
    (("--chain", "1"), "testbed", "Invalid value for '--chain': 1 is not in the range 2<=x<=100"),
    (("--chain", "2"), "local", "--chain: site local is a local site: no Slurm to hold a job until another ends"),
    (("--after", "12"), "local", "--after: site local is a local site"),
    (("--set", "stop_signal=HUP"), "testbed", "--set stop_signal='HUP': Input should be 'TERM', 'USR1', 'USR2' or"),
    (("--stage", "multi-node", "--nodes", "2", "--launcher", "torchrun", "--set", "stop_signal=USR1"), "testbed",
     "--set stop_signal: the torchrun launcher does not use it; it is used by srun"),
    (("--set", "requeue_by=framework"), "local", "--set requeue_by: site local is a local site (no Slurm)"),
    (("--chain", "2", "--array", "0-3"), "testbed", "--chain with --array or --sweep: a chain of job arrays is not"),
    (("--chain", "2", "--sweep", "lr=0.1,0.2"), "testbed", "--chain with --array or --sweep"),
    (("--sbatch", "dependency=afterok:12"), "testbed",
     "sets --dependency, which clusterkit writes itself; use submit --after JOB or --chain N"),
])
def test_bad_long_run_input_is_one_line_and_writes_nothing(ck, tmp_path: Path, args: tuple[str, ...], site: str,
                                                          message: str) -> None:
    result = _dry_run(ck, tmp_path, *args, site=site)
    assert result.code == 2, result.err
    lines = [ln for ln in result.err.splitlines() if ln.startswith("clusterkit: error:")]
    assert len(lines) == 1 and message in lines[0], result.err
    assert "Traceback" not in result.err and not (tmp_path / "run").exists()


def test_chain_with_wait_is_refused_before_anything_is_queued(ck, tmp_path: Path) -> None:
    result = ck("submit", "--site", "testbed", "--chain", "2", "--wait", "--out", str(tmp_path / "run"), "--",
                "python", "train.py")
    assert result.code == 2 and "--chain queues its jobs and returns" in result.err, result.err
    assert not (tmp_path / "run").exists()


def test_after_a_clusterkit_job_needs_its_record(ck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path / "state"))
    result = ck("submit", "--site", "testbed", "--after", "testbed:777", "--out", str(tmp_path / "run"), "--",
                "python", "train.py")
    assert result.code == 2, result.err
    assert "--after testbed:777: no job record for 'testbed:777'" in result.err, result.err
    assert not (tmp_path / "run").exists()


def test_doctor_category_prints_one_word_and_refuses_json_with_it(ck, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "1.r0.rank0.out").write_text(
        "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
        "    lr = config[\"lr\"]\nKeyError: 'lr'\n")
    result = ck("doctor", "--logs", str(logs), "--category")
    assert result.code == 1 and result.out == "user-code\n", (result.out, result.err)
    both = ck("doctor", "--logs", str(logs), "--category", "--json")
    assert both.code == 2 and "give --json or --category, not both" in both.err
