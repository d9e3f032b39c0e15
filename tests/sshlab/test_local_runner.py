"""LocalRunner: the same contract as SSHRunner, on this machine (no lab needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from clusterkit.nodes.transport import ErrorKind, LocalRunner, NodeOutput
from tests.conftest import REPO, default_sigint


def test_runs_the_script_once_per_host_with_output_status_and_label() -> None:
    seen: list[NodeOutput] = []
    res = LocalRunner().run_many(["a", "b", "a"], 'echo "on $CLUSTERKIT_HOST"; echo e >&2; exit 4',
                                 on_result=seen.append)
    assert list(res) == ["a", "b"]  # duplicates run once, input order kept
    assert sorted(r.host for r in seen) == ["a", "b"]
    for host, r in res.items():
        assert (r.stdout, r.stderr, r.exit_status, r.error) == (f"on {host}\n", "e\n", 4, None)
        assert r.reachable and not r.ok
    assert res.interrupted is False


def test_a_hung_command_is_killed_with_its_children(tmp_path) -> None:
    pidfile = tmp_path / "child.pid"
    script = f"echo begun; sleep 60 & echo $! > {pidfile}; wait"
    r = LocalRunner(command_timeout_s=0.5).run_many(["x"], script)["x"]
    assert r.error is ErrorKind.COMMAND_TIMEOUT and r.stdout == "begun\n" and r.exit_status is None
    child = int(pidfile.read_text())
    # the background sleep went with the process group (a zombie until init reaps it at most)
    try:
        state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z")


def test_ctrl_c_returns_partial_results(tmp_path) -> None:
    code = textwrap.dedent("""
        import json, sys
        from clusterkit.nodes.transport import LocalRunner
        script = '[ "$CLUSTERKIT_HOST" = quick ] && exit 0; sleep 60'
        res = LocalRunner().run_many(["quick", "slow1", "slow2"], script,
                                     on_result=lambda r: print("done", r.host, file=sys.stderr, flush=True))
        print(json.dumps({"interrupted": res.interrupted,
                          "errors": {h: r.error and r.error.value for h, r in res.items()}}))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    assert proc.stderr is not None and proc.stderr.readline().strip() == "done quick"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert out.strip() == ('{"interrupted": true, "errors": {"quick": null, '
                           '"slow1": "interrupted", "slow2": "interrupted"}}')


def test_ctrl_c_tests_pass_when_the_runner_ignores_sigint(tmp_path) -> None:
    """Run as ``nohup bash tests/run.sh &``, pytest starts with SIGINT ignored and every child
    inherits that; the Ctrl-C tests give the process they interrupt default handling themselves.

    The inner pytest has a base folder of its own: with the shared one (``pytest-of-<user>``) it
    deleted, as it ended, the oldest numbered folders other sessions had left there, and a Slurm
    session's run folders (a code snapshot each) took it past two minutes on a busy machine."""
    test = "tests/sshlab/test_local_runner.py::test_ctrl_c_returns_partial_results"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "inner"), test],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr


def test_result_json_shape() -> None:
    r = LocalRunner().run_many([os.uname().nodename], "echo hi")[os.uname().nodename]
    assert r.to_json() == {"host": os.uname().nodename, "ok": True, "reachable": True,
                           "exit_status": 0, "error": None, "reason": "",
                           "duration_s": round(r.duration_s, 3), "truncated": False,
                           "stdout": "hi\n", "stderr": ""}


def test_results_are_delivered_on_the_calling_thread() -> None:
    import threading

    threads = set()
    LocalRunner(fanout=4).run_many([f"h{i}" for i in range(8)], "true",
                                   on_result=lambda r: threads.add(threading.current_thread()))
    assert threads == {threading.current_thread()}


def test_the_engine_abandons_a_worker_stuck_past_its_budget_and_raises_bugs() -> None:
    import threading

    import pytest

    from clusterkit.nodes.transport import fan_out

    release = threading.Event()

    def work(host: str, _watchdog: object) -> NodeOutput:
        if host == "stuck":  # a library call that ignores every timeout
            release.wait(30)
        return NodeOutput(host, 0)

    try:
        res = fan_out(["stuck", "fine"], work, fanout=2, budget_s=0.5)
    finally:
        release.set()
    assert res["fine"].ok
    assert res["stuck"].error is ErrorKind.TIMEOUT and "abandoned" in res["stuck"].reason

    def buggy(host: str, _watchdog: object) -> NodeOutput:
        raise ZeroDivisionError("a bug")

    with pytest.raises(ZeroDivisionError):  # bugs are not dressed up as node failures
        fan_out(["x"], buggy, fanout=1, budget_s=5)
