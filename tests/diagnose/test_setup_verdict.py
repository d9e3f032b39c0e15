"""doctor names a setup step that ended the job (the job script's reason, as Slurm's view carries it)."""

from __future__ import annotations

from clusterkit.diagnose import verdict


def test_a_failed_setup_step_is_named() -> None:
    view = verdict.SlurmView(state="FAILED", reason="setup step 2 failed (exit 3)", exit_code=3)
    v = verdict.judge(verdict.Attempt(0), view)
    assert v["category"] == "user-code"
    assert v["summary"].startswith("setup step 2 failed (exit 3): the job ended before any rank started")
    assert v["evidence"] == ["slurm: job state FAILED, reason setup step 2 failed (exit 3)"]
    node = verdict.judge(verdict.Attempt(0), verdict.SlurmView(state="FAILED", reason="node setup step 1 failed "
                                                                                        "(exit 7)", exit_code=7))
    assert node["summary"].startswith("node setup step 1 failed (exit 7)")


def test_other_reasons_keep_the_fallback() -> None:
    v = verdict.judge(verdict.Attempt(0), verdict.SlurmView(state="FAILED", reason="NonZeroExitCode", exit_code=3))
    assert v["category"] == "unknown" and "setup" not in v["summary"]
