"""The job's setup steps as bash runs them (tests/jobscript harness: real signals, Slurm's tools
as stand-ins): a failing step ends the job with its reason and no rank starts; ``exit`` in a
step is caught; steps that pass let the launcher start; a TERM from Slurm during a step leaves
the end to Slurm (no result file, so a requeued run is not taken for a finished one)."""

from __future__ import annotations

from tests.jobscript.harness import until


def _failed_before_ranks(j, status: int, reason: str) -> None:  # type: ignore[no-untyped-def]
    assert j.wait() == status, j.log()
    assert (j.result(), j.reason()) == (f"{status}\n", reason + "\n"), j.log()
    assert f"clusterkit: {reason}" in j.log()
    assert j.rank_pids() == [], "a rank started after a failed setup step"


def test_a_failing_step_ends_the_job(job) -> None:
    j = job("--setup", "true", "--setup", "false", "--setup", "touch \"$JS_DIR/third\"").start()
    _failed_before_ranks(j, 1, "setup step 2 failed (exit 1)")
    assert not (j.work / "third").exists() and j.calls("srun") == []


def test_exit_in_a_step_is_caught_with_its_status(job) -> None:
    j = job("--setup", "echo checking; exit 7").start()
    _failed_before_ranks(j, 7, "setup step 1 failed (exit 7)")


def test_a_failing_node_setup_step_ends_the_job(job) -> None:
    j = job("--node-setup", "[ \"$SLURM_NODEID\" = 1 ] && exit 3; touch \"$JS_DIR/node$SLURM_NODEID\"").start()
    _failed_before_ranks(j, 3, "node setup step 1 failed (exit 3)")
    assert (j.work / "node0").exists()   # one task per node: node 0's ran, node 1's failed
    assert "--ntasks-per-node=1" in j.calls("srun")


def test_steps_that_pass_let_the_launcher_start_under_set_u(job) -> None:
    # the batch shell runs with `set -u`: a ${SLURM_*} it does not have is empty, not an error
    j = job("--setup", "export FROM_SETUP=yes", "--env", "PER_NODE=n${SLURM_NODEID}",
            "--env", "STEP=${SLURM_STEP_ID}").start()
    j.await_ranks()
    assert j.reason() is None and j.result() is None
    j.kill()


def test_slurms_term_during_a_step_leaves_the_end_to_slurm(job) -> None:
    # the mark is made by the step's own long-running process, so the TERM finds it running: a TERM
    # between a `touch` and the fork of a `sleep` after it is taken by the forked child before its
    # exec, and the shell then waits out the whole sleep (as it would in a real job)
    j = job("--setup", "bash -c 'touch \"$JS_DIR/in-setup\"; exec sleep 30'").start()
    until("the setup step to start", lambda: (j.work / "in-setup").exists())
    j.slurm_term()
    assert j.wait() != 0
    assert j.result() is None and j.reason() is None, j.log()
    assert j.rank_pids() == []
