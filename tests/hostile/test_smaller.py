"""Smaller holes of round three: an srun flag that takes no value followed by a word, array
indices in other scripts' digits or past MaxArraySize, a record whose fields name another
record, and a newest record that cannot be read.  Each runs the real CLI or the real reader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error


def _render(ck, tmp_path: Path, *opts: str):  # type: ignore[no-untyped-def]
    return ck("render", "--site", "testbed", "--stage", "multi-node", "--launcher", "srun", "--out",
              str(tmp_path / "run"), *opts, "--", "python", "train.py", cwd=tmp_path)


@pytest.mark.parametrize("words", [["--oversubscribe", "X"], ["--label", "X"], ["--exclusive", "X"],
                                   ["--over", "X"], ["-O", "X"], ["--no-kill", "X"], ["--overlap", "/bin/sh"]])
def test_a_bare_word_after_an_srun_flag_is_refused(ck, tmp_path: Path, words: list[str]) -> None:
    result = _render(ck, tmp_path, *(f"--srun-arg={w}" for w in words))
    assert_one_line_error(result, 2, "would take it for the program to run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("words", [["--oversubscribe"], ["--mem", "4G"], ["--mem=4G"], ["--exclusive=user"],
                                   ["--comment", "x y"], ["--cpu-bind", "cores"], ["-l"]])
def test_srun_flags_and_options_with_values_pass(ck, tmp_path: Path, words: list[str]) -> None:
    result = _render(ck, tmp_path, *(f"--srun-arg={w}" for w in words))
    assert result.code == 0, result


@pytest.mark.parametrize("spec", ["٣", "0-٣", "\uff11", "0-3:²", "3%٢"])
def test_array_indices_are_ascii_digits_only(ck, tmp_path: Path, spec: str) -> None:
    result = _render(ck, tmp_path, "--array", spec)
    assert_one_line_error(result, 2, "--array")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("spec", ["0-4000000", "0-1001", "0-4000000:1%1", "5,0-2000000"])
def test_an_array_past_max_array_size_is_refused_before_it_is_built(tmp_path: Path, spec: str) -> None:
    code = ("import resource, sys\nfrom clusterkit.cli import main\nrc = 0\n"
            "try:\n main(sys.argv[1:])\nexcept SystemExit as e:\n rc = e.code\n"
            "hwm = next(ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:'))\n"
            "print('MAXRSS', hwm.split()[1], file=sys.stderr)\nsys.exit(rc)\n")
    p = subprocess.run([sys.executable, "-c", code, "render", "--site", "testbed", "--array", spec, "--out",
                        str(tmp_path / "run"), "--", "python", "t.py"], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    err = [ln for ln in p.stderr.splitlines() if not ln.startswith("MAXRSS")]
    assert p.returncode == 2 and len(err) == 1 and "past MaxArraySize 1001" in err[0], p.stderr
    assert int(next(ln for ln in p.stderr.splitlines() if ln.startswith("MAXRSS")).split()[1]) < 250 * 1024
    assert not (tmp_path / "run").exists()


def test_an_array_within_the_sites_max_array_size_renders(ck, tmp_path: Path) -> None:
    site = tmp_path / "big.yaml"
    site.write_text((Path(__file__).parents[2] / "site_configs" / "testbed.yaml").read_text()
                    .replace("name: testbed", "name: big") + "\n")
    text = site.read_text()
    assert "scheduler:" in text
    site.write_text(text.replace("scheduler:", "scheduler:\n  max_array_size: 5001", 1))
    result = ck("render", "--site", str(site), "--array", "0-5000%10", "--out", str(tmp_path / "run"), "--",
                "python", "t.py", cwd=tmp_path)
    assert result.code == 0, result


def _record(root: Path, name: str, text: str | None = None, **kw: object) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    data = dict(version=1, job_id="7", scheduler="local", site="local", site_source="x.yaml",
                stage="single-node", launcher="torchrun", job_name="ck", nnodes=1, world_size=1,
                command=["python", "train.py"], run_dir=str(root), script="job.sbatch",
                submitted_at="2026-01-01T00:00:00.000000Z", host="login1", plan={}, state="FAILED", exit_code=1)
    data.update(kw)
    path = root / name
    path.write_text(text if text is not None else json.dumps(data))
    return path


def test_a_record_whose_site_field_is_given_twice_is_not_listed(ck, tmp_path: Path) -> None:
    root = tmp_path / "state" / "jobs"
    path = _record(root, "20260101T000000000000-local-7.json")
    path.write_text(path.read_text().replace('"site": "local",', '"site": "local", "site": "other",'))
    _record(root, "20260101T000000000001-local-8.json", job_id="8")
    res = ck.proc("status", "--all", "--json", env={"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")})
    assert res.code == 0, res
    assert [j["job"] for j in json.loads(res.out)["jobs"]] == ["local:8"]
    assert "given twice" in res.err


def test_a_record_under_another_jobs_file_name_is_not_listed_twice(ck, tmp_path: Path) -> None:
    root = tmp_path / "state" / "jobs"
    _record(root, "20260101T000000000000-local-7.json", state="RUNNING", exit_code=None)
    _record(root, "20260101T000000000001-local-9.json", state="RUNNING", exit_code=None)   # a copy of 7
    res = ck.proc("status", "--all", "--json", env={"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")})
    assert [j["job"] for j in json.loads(res.out)["jobs"]] == ["local:7"], res
    assert "name another file" in res.err
    assert sorted(p.name for p in root.iterdir() if p.suffix == ".json") == [
        "20260101T000000000000-local-7.json", "20260101T000000000001-local-9.json"]


@pytest.mark.parametrize("newest", ['{"version": 1, "job_id": "9", "site": "lo', None])
def test_a_newest_record_that_cannot_be_read_is_skipped_with_a_warning(ck, tmp_path: Path,
                                                                       newest: str | None) -> None:
    root = tmp_path / "state" / "jobs"
    _record(root, "20260101T000000000000-local-7.json")
    _record(root, "20260101T000000000001-local-9.json", text=newest, job_id="9", nnodes="two", plan=[])
    res = ck.proc("status", env={"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")})
    assert res.code == 0, res
    assert "job 7" in res.out and "skipping unreadable record" in res.err and "local-9.json" in res.err


@pytest.mark.parametrize("command", ["status", "logs", "doctor"])
def test_a_lone_record_that_cannot_be_read_is_skipped_with_a_warning(ck, tmp_path: Path, command: str) -> None:
    """The only record truncated (or of wrong types): said as skipped, then no record (exit 2),
    never a runtime failure (exit 1) naming the record as if it were the job."""
    root = tmp_path / "state" / "jobs"
    _record(root, "20260101T000000000001-local-9.json", text='{"version": 1, "job_id": "9", "site": "lo')
    res = ck.proc(command, env={"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")})
    assert res.code == 2 and "Traceback" not in res.err, res
    assert "skipping unreadable record" in res.err and "local-9.json" in res.err
    assert "no readable job record" in res.err
