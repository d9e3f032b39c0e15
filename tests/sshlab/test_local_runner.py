"""LocalRunner: the same contract as SSHRunner, on this machine (no lab needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from clusterkit.runner import ErrorKind, LocalRunner, NodeResult


def test_runs_the_script_once_per_host_with_output_status_and_label() -> None:
    seen: list[NodeResult] = []
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
        state = open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z")


def test_ctrl_c_returns_partial_results(tmp_path) -> None:
    code = textwrap.dedent("""
        import json, sys
        from clusterkit.runner import LocalRunner
        script = '[ "$CLUSTERKIT_HOST" = quick ] && exit 0; sleep 60'
        res = LocalRunner().run_many(["quick", "slow1", "slow2"], script,
                                     on_result=lambda r: print("done", r.host, file=sys.stderr, flush=True))
        print(json.dumps({"interrupted": res.interrupted,
                          "errors": {h: r.error and r.error.value for h, r in res.items()}}))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None and proc.stderr.readline().strip() == "done quick"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert out.strip() == ('{"interrupted": true, "errors": {"quick": null, '
                           '"slow1": "interrupted", "slow2": "interrupted"}}')


def test_result_json_shape() -> None:
    r = LocalRunner().run_many([os.uname().nodename], "echo hi")[os.uname().nodename]
    assert r.to_json() == {"host": os.uname().nodename, "ok": True, "reachable": True,
                           "exit_status": 0, "error": None, "reason": "",
                           "duration_s": round(r.duration_s, 3), "truncated": False,
                           "stdout": "hi\n", "stderr": ""}
