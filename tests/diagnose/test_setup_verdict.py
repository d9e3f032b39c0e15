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


def test_too_few_good_nodes_is_named_with_the_nodes() -> None:
    reason = ("preflight: 2 nodes failed, 1 spares: node2 (failed: gpu.count: 7 GPUs), node3 (unreachable); "
              "resubmit without them: clusterkit submit --exclude-from 12 --site s -- python t.py")
    v = verdict.judge(verdict.Attempt(0), verdict.SlurmView(state="FAILED", reason=reason, exit_code=1))
    assert v["category"] == "bad-nodes"
    assert v["summary"] == ("preflight: 2 nodes failed, 1 spares: node2 (failed: gpu.count: 7 GPUs), "
                            "node3 (unreachable): the job ended before training")
    assert v["advice"][0].startswith("resubmit without them: clusterkit submit --exclude-from JOB")
    slow = verdict.SlurmView(state="FAILED", exit_code=1, reason="perf check: 1 nodes below par, 0 spares: n1 (slow)")
    perf = verdict.judge(verdict.Attempt(0), slow)
    assert perf["category"] == "bad-nodes" and perf["summary"].startswith("perf check: 1 nodes below par")
