"""End to end on the local site: the job runs the code as it was at submit time.  The job waits
at a setup step for a gate file the test creates, so the test changes the script after
``submit`` returned and before the job reads it; with ``--no-snapshot`` the job runs the change."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import CLI
from tests.submit.conftest import submitted_job_id

SCRIPT = """import pathlib
MARK = "{mark}"
print("marker", MARK, "from", pathlib.Path(__file__).resolve(), flush=True)
"""


def _repo(tmp_path: Path) -> Path:
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "train.py").write_text(SCRIPT.format(mark="as-submitted"))
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"]):
        subprocess.run(["git", "-C", str(tree), "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
                       check=True, capture_output=True)
    return tree


def _ended(ck: CLI, job: str, deadline_s: float = 120) -> dict[str, object]:
    """The job's status once it has ended (polled: a local job's end is its result file)."""
    deadline = time.monotonic() + deadline_s
    while True:
        st = json.loads(ck("status", job, "--json").out)
        if st["state"] not in ("PENDING", "RUNNING"):
            return st  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"job {job} did not end: {st['state']}"
        time.sleep(0.2)


@pytest.mark.torch
@pytest.mark.parametrize("snapshot", [True, False], ids=["snapshot", "no-snapshot"])
def test_a_file_changed_after_submit_changes_nothing_the_job_runs(ck: CLI, tmp_path: Path, snapshot: bool) -> None:
    pytest.importorskip("torch")   # the local site's launcher is torchrun
    tree = _repo(tmp_path)
    gate = tmp_path / "gate"
    local = ck.bind(process=True, cwd=tree, timeout=180, env={"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")})
    run = tmp_path / "run"
    proc = local("submit", "--site", "local", "--gpus-per-node", "1", "--no-wait", "--out", str(run),
                 *([] if snapshot else ["--no-snapshot"]),
                 "--setup", f"while [ ! -e {gate} ]; do sleep 0.1; done", "--", "python", "train.py")
    assert proc.code == 0, proc.err
    job = submitted_job_id(proc.out)
    (tree / "train.py").write_text(SCRIPT.format(mark="edited-later"))   # the job waits at the gate meanwhile
    gate.touch()
    st = _ended(local, job)
    assert st["state"] == "COMPLETED", st
    out = "".join(p.read_text() for p in run.glob("*_log.out"))
    if snapshot:
        assert "marker as-submitted from " + str(run / "code" / "train.py") in out, out
        assert "code: snapshot of" in proc.out and "(clean; 1 file(s)" in proc.out
        code = st["code"]
        assert isinstance(code, dict) and code["dirty"] is False and code["files"] == 1
        assert code["commit"] == subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], check=True,
                                                capture_output=True, text=True).stdout.strip()
        assert json.loads((run / "plan.json").read_text())["code"]["tree"] == code["tree"]
    else:
        assert "marker edited-later from " + str(tree / "train.py") in out, out
        assert st["code"] is None and not (run / "code").exists()


def test_dry_run_refuses_a_script_missing_from_the_snapshot(ck: CLI, tmp_path: Path) -> None:
    tree = _repo(tmp_path)
    local = ck.bind(process=True, cwd=tree, env={"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")})
    ok = local("submit", "--site", "local", "--dry-run", "--", "python", "train.py")
    assert ok.code == 0 and f'export CK_CODE_DIR={tree}/runs/' in ok.out, ok.err
    (tree / "ignored.py").write_text("print(1)\n")
    (tree / ".git" / "info" / "exclude").write_text("ignored.py\n")
    for script in ("trian.py", "ignored.py"):
        bad = local("submit", "--site", "local", "--dry-run", "--", "python", script)
        assert bad.code == 2 and bad.err.count("\n") == 1, bad.err
        assert f"the command's script {script} is not in the code snapshot of {tree}" in bad.err
    assert local("submit", "--site", "local", "--dry-run", "--no-snapshot", "--", "python", "trian.py").code == 0
    assert not (tree / "runs").exists() and not (tmp_path / "state").exists()


@pytest.mark.parametrize(("limit", "what"), [("code_max_files=1", "2 files, more than 1"),
                                             ("code_max_mb=1", "more than 1.0 MiB")])
def test_a_snapshot_past_its_limit_is_one_line_and_leaves_nothing(ck: CLI, tmp_path: Path, limit: str,
                                                                  what: str) -> None:
    tree = _repo(tmp_path)
    (tree / "notes.bin").write_bytes(b"x" * (1 << 20))   # untracked, not ignored: in the snapshot
    local = ck.bind(process=True, cwd=tree, env={"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")})
    bad = local("submit", "--site", "local", "--set", limit, "--", "python", "train.py")
    assert bad.code == 2 and bad.err.count("\n") == 1, bad.err
    assert f"code snapshot of {tree}: " in bad.err and what in bad.err and "--no-snapshot" in bad.err
    assert not (tree / "runs").exists() and not list((tmp_path / "state").rglob("*.json"))   # no job recorded
