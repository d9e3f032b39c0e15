"""``status JOB --run`` on a real local job that saves a checkpoint and then fails: the time lost
is from the checkpoint to the failure, the rest of its training is kept; ``--html FILE`` writes
one self-contained page that headless Chromium renders with the failure on it."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.conftest import CLI, REPO
from tests.progress.failing_job import LOST_STEPS, SAVE_S, STEP_S

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.torch  # every test reads the failed local torchrun job of failed_run


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def run_dir_of(ck: CLI, env: dict[str, str], job: str) -> str:
    return str(json.loads(ck.proc("status", job, "--json", env=env).out)["run_dir"])


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[CLI, dict[str, str], str, float, Path]:
    pytest.importorskip("torch", reason="the local site's launcher is torchrun (pip install torch, CPU build)")
    tmp = tmp_path_factory.mktemp("failed")
    ck = CLI()
    env = {"CLUSTERKIT_STATE_DIR": str(tmp / "state"), "PYTHONPATH": str(REPO / "toolkit")}
    before = time.time()
    res = ck.proc("submit", "--site", "local", "--out", str(tmp / "run"), "--wait",
                  "--", "python", str(REPO / "tests" / "progress" / "failing_job.py"), env=env)
    took = time.time() - before
    assert res.code != 0, res.out + res.err
    job = json.loads(ck.proc("status", "--json", env=env).out)["job_id"]
    return ck, env, job, took, tmp


def test_the_lost_time_is_from_the_checkpoint_to_the_failure(failed_run) -> None:  # type: ignore[no-untyped-def]
    ck, env, job, took, _ = failed_run
    got = ck.proc("status", job, "--run", "--json", env=env)
    assert got.code == 0, got.err
    run = json.loads(got.out)["run"]
    c = run["causes"]
    (f,) = c["failures"]
    assert f["job_id"] == job and f["what"] == "allocation ended FAILED" and f["checkpoint"] is not None
    # the job trained LOST_STEPS steps (and one more pause) after its save, then failed; its end is
    # the result file's time, in whole seconds (so up to 1 s early)
    (alloc,) = run["allocations"]
    log = (Path(run_dir_of(ck, env, job)) / "logs" / f"{job}.progress.log").read_text().splitlines()
    save = float(next(m for m in log if m.endswith("phase=save")).split()[1].removeprefix("time="))
    assert f["checkpoint"] == pytest.approx(save) and f["time"] == alloc["end"]
    assert f["lost_s"] == pytest.approx(alloc["end"] - save)
    assert (LOST_STEPS + 1) * STEP_S - 1 < f["lost_s"] <= took
    assert c["lost_s"] == f["lost_s"] and c["kept_s"] >= 2 * STEP_S
    parts = c["startup_s"] + c["recovery_s"] + c["kept_s"] + c["lost_s"] + c["unreported_s"]
    assert parts == pytest.approx(c["allocated_s"]) and c["ettr"] == pytest.approx(c["kept_s"] / c["allocated_s"])
    assert c["startup_s"] > 0 and len(c["checkpoints"]) == 1
    # the save's own time, measured from its mark to the next, for plan --save-s
    (took_s,) = c["saves_s"]
    assert SAVE_S <= took_s < SAVE_S + 1, c["saves_s"]
    text = ck.proc("status", job, "--run", env=env)
    assert text.code == 0 and "allocation ended FAILED" in text.out and "ETTR" in text.out, text.out
    assert f"measured: saves {took_s:.1f} s (median of 1); for the cadence: clusterkit plan ... --save-s 1 " \
        in text.out, text.out


def test_a_bad_html_path_is_one_line_and_exit_2(failed_run) -> None:  # type: ignore[no-untyped-def]
    ck, env, job, _, tmp = failed_run
    res = ck.proc("status", job, "--run", "--html", str(tmp / "no" / "such" / "x.html"), env=env)
    assert res.code == 2 and res.err.startswith("clusterkit: error: --html ") and res.err.count("\n") == 1, res
    assert ck.proc("status", job, "--html", str(tmp / "x.html"), env=env).code == 2   # --html needs --run


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (tests/run.sh installs it)")
def test_the_page_renders_in_chromium_with_the_failure(failed_run) -> None:  # type: ignore[no-untyped-def]
    ck, env, job, _, tmp = failed_run
    out = tmp / "run.html"
    res = ck.proc("status", job, "--run", "--html", str(out), env=env)
    assert res.code == 0 and f"wrote {out}" in res.err, res
    page = out.read_text()
    parsed = _Tags()
    parsed.feed(page)
    tags = [t for t, _ in parsed.tags]
    assert "script" not in tags and "img" not in tags and "link" not in tags and "svg" in tags
    assert not [a for _, attrs in parsed.tags for k, a in attrs.items() if k in ("src", "href")]
    browser = [str(CHROMIUM), "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--user-data-dir={tmp / 'profile'}"]
    dom = subprocess.run([*browser, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    assert "allocation ended FAILED" in dom and '<tr class="failure">' in dom and "ETTR" in dom
    shot = tmp / "run.png"
    subprocess.run([*browser, f"--screenshot={shot}", "--window-size=1000,900", out.as_uri()],
                   capture_output=True, timeout=120, check=True)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert int.from_bytes(data[16:20], "big") == 1000          # IHDR width: the window's


def test_a_failure_the_supervisor_did_not_judge_gets_doctors_verdict_on_its_logs(failed_run) -> None:  # type: ignore[no-untyped-def]
    """A local job has no supervisor to ask doctor when it fails: status --run asks doctor itself,
    on that job's logs, and says that the verdict is doctor's, read now."""
    ck, env, job, _, _ = failed_run
    (f,) = json.loads(ck.proc("status", job, "--run", "--json", env=env).out)["run"]["causes"]["failures"]
    assert f["judged_by"] == "doctor" and f["not_judged"] == ""
    assert f["verdict"].startswith("user-code")
    assert "RuntimeError: the training loop failed after step 6" in f["verdict"]
    text = ck.proc("status", job, "--run", env=env).out
    assert "allocation ended FAILED; doctor (on its logs, now): user-code" in text, text


def test_without_its_logs_or_past_the_bounds_a_failure_is_not_judged_and_says_why(  # type: ignore[no-untyped-def]
        failed_run, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from clusterkit.api import account_verdicts as av
    from clusterkit.scheduler.records import load_record
    from clusterkit.scheduler.runcauses import Causes, Failure

    _, env, job, _, tmp = failed_run
    (path,) = (Path(env["CLUSTERKIT_STATE_DIR"]) / "jobs").glob("*.json")
    rec = load_record(path)
    fail = Failure(job, 0, 0.0, "allocation ended NODE_FAIL", "", (), None, 0.0, 0.0)
    causes = Causes(10.0, 0.0, 0.0, 0.0, 0.0, 10.0, 0.0, (fail,))

    def one(records: dict) -> Failure:  # type: ignore[type-arg]
        (got,) = av.judged(causes, records).failures
        return got

    assert one({}).not_judged == "no record of this job here: its logs are where it was submitted"
    empty = tmp / "empty-run"
    empty.mkdir(exist_ok=True)
    assert one({job: rec.model_copy(update={"run_dir": str(empty)})}).not_judged == f"no log files in {empty}"
    assert one({job: rec}).judged_by == "doctor"
    later = replace(fail, restart=3)                                   # the logs hold restart 0 only
    (got,) = av.judged(replace(causes, failures=(later,)), {job: rec}).failures
    assert got.not_judged == "its logs hold nothing of restart 3" and got.verdict == ""
    monkeypatch.setattr(av, "MAX_FILES", 1)
    cut = one({job: rec})
    assert cut.verdict == "" and "are more than status reads" in cut.not_judged
    assert cut.not_judged.endswith(f"clusterkit doctor {job}")
    judged_then = replace(fail, verdict="hardware (node n1): Xid 79")  # the supervisor's, kept as it was
    (kept,) = av.judged(replace(causes, failures=(judged_then,)), {}).failures
    assert kept.verdict == "hardware (node n1): Xid 79" and kept.judged_by == "supervisor"
