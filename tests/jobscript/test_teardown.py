"""The job's teardown steps as the rendered job script and its supervisor run them (tests/jobscript
harness: real bash, real signals): once the training has ended for good they run in order on the
batch host, succeeded or not, with the training's status; each one's status is recorded apart
(``<job>.teardown``) and none changes the training's status or result; where Slurm ends the run
itself (a requeue) they do not run."""

from __future__ import annotations

import signal

from tests.jobscript.harness import JOB_ID

STEPS = ("--teardown", 'printf "%s|%s\\n" "$CK_TRAINING_STATUS" "$CK_TRAINING_REASON" > "$JS_DIR/seen"; '
         'for f in "$JS_DIR"/ranks/*.pid; do kill -0 "$(cat "$f")" 2>/dev/null && echo "$f"; done '
         '> "$JS_DIR/alive-then"; exit 3',
         "--teardown", 'touch "$JS_DIR/second"')


def _teardown(j) -> str | None:  # type: ignore[no-untyped-def]
    f = j.run_dir / f"{JOB_ID}.teardown"
    return f.read_text() if f.exists() else None


def test_after_training_that_succeeded(job) -> None:
    j = job(*STEPS).run_through(0)
    assert j.result() == "0\n" and j.reason() is None, j.log()
    assert (j.work / "seen").read_text() == "0|\n"
    assert (j.work / "second").exists()                       # a failing step does not stop the next
    assert _teardown(j) == "1 3\n2 0\n"
    assert "teardown step 1 of 2 ended with status 3" in j.log()
    # the launcher had ended when the first step ran: no rank was still running
    assert len(j.rank_pids()) == 2 and (j.work / "alive-then").read_text() == ""


def test_after_training_that_failed_the_training_status_stays(job) -> None:
    j = job(*STEPS, JS_RANK_RC="4").run_through(4)
    assert j.result() == "4\n", j.log()
    assert (j.work / "seen").read_text().startswith("4|")
    assert _teardown(j) == "1 3\n2 0\n"


def test_a_step_ended_by_a_signal_is_recorded_so(job) -> None:
    j = job("--teardown", "kill -KILL $$").run_through(0)
    assert j.result() == "0\n" and _teardown(j) == f"1 {128 + signal.SIGKILL}\n"


def test_not_run_when_slurm_requeues_the_run(job) -> None:
    j = job(*STEPS, restarts=1).start()
    j.await_ranks()
    j.usr2()
    j.await_marker("saved")
    j.await_log("waiting for Slurm to end this run; no result is written")
    j.term_shell()
    assert j.wait() == -signal.SIGTERM, j.log()
    assert j.result() is None and _teardown(j) is None and not (j.work / "seen").exists()


def test_on_a_local_site_too(job) -> None:
    j = job(*STEPS, site="local", stage="single-node", nodes=1, launcher="torchrun")
    j.env["SUBMITIT_LOCAL_JOB_ID"] = JOB_ID
    j.run_through(0)
    assert j.result() == "0\n" and _teardown(j) == "1 3\n2 0\n"
