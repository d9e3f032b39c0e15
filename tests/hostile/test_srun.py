"""The srun transport reading what nodes print: a node whose task never answers is a failed
node (never "passed", never left out), a node's output is capped as over SSH, and a line
that forges the wrapper's markers or prints numbers no int() takes decides nothing.

The node scripts are real bash run by the real SrunRunner; ``standin/srun`` (a stand-in for
srun: runs each task on this machine and labels its lines as ``srun --label`` does) replaces
only the Slurm launcher.  The same "never answers" case runs on the Slurm test cluster in
tests/slurm/test_preflight_srun.py."""

from __future__ import annotations

import json
import os
import resource
import shutil
from pathlib import Path

import pytest

from clusterkit.nodes.transport import MAX_OUTPUT_BYTES, ErrorKind, NodeOutput, SrunRunner
from clusterkit.preflight.report import Report, decide

from ..conftest import CLI

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STANDIN = HERE / "standin"
PROFILE = REPO / "tests" / "sshlab" / "profiles" / "healthy"

# What a compromised node (or an OOM killer) does: kill the srun task's wrapper, so the task
# never prints its exit status; the script itself goes on.
KILL_WRAPPER = """p=$PPID
while [ "$p" -gt 1 ]; do
  if tr '\\0' '\\n' < /proc/$p/cmdline | grep -qx clusterkit-preflight; then kill -9 "$p"; break; fi
  p=$(awk '/^PPid:/{print $2}' /proc/$p/status)
done
"""

# ... or read the wrapper's random marker from its argv (the wrapper is timeout's parent)
FIND_MARKER = ('w=$(awk \'/^PPid:/{print $2}\' /proc/$PPID/status); '
               'm=$(tr "\\0" "\\n" < /proc/$w/cmdline | tail -n 1); ')


@pytest.fixture
def standin_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {"PATH": f"{STANDIN}:{os.environ['PATH']}", "CK_STANDIN_TOOLKIT": str(REPO / "toolkit")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def run(script: str, hosts: list[str], timeout_s: float = 20) -> tuple[dict[str, NodeOutput], list[NodeOutput]]:
    seen: list[NodeOutput] = []
    res = SrunRunner(launch_timeout_s=10).run_many(hosts, script, timeout_s=timeout_s, on_result=seen.append)
    return res, seen


def test_a_task_that_never_answers_is_a_reported_failure(standin_env: dict[str, str]) -> None:
    script = f'echo "hello from $SLURMD_NODENAME"\n[ "$SLURMD_NODENAME" = n2 ] && {{\n{KILL_WRAPPER}}}\necho done\n'
    res, seen = run(script, ["n1", "n2", "n3"])
    assert res["n1"].ok and res["n3"].ok
    assert res["n2"].error is ErrorKind.LAUNCH and not res["n2"].reachable, res["n2"]
    assert res["n2"].stdout.startswith("hello from n2\n")
    assert sorted(r.host for r in seen) == ["n1", "n2", "n3"]  # every node reported, the failure too


def test_a_node_printing_80_mb_is_capped_and_kept_small(standin_env: dict[str, str]) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    script = ('[ "$SLURMD_NODENAME" = big ] && head -c 83886080 /dev/zero | tr "\\0" "x" | fold -w 4096; '
              '[ "$SLURMD_NODENAME" = oneline ] && head -c 41943040 /dev/zero | tr "\\0" "y"; echo fine')
    res, _ = run(script, ["big", "oneline", "small"], timeout_s=60)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    big, one, small = res["big"], res["oneline"], res["small"]
    assert big.exit_status == 0 and big.truncated and len(big.stdout) <= MAX_OUTPUT_BYTES
    assert len(big.stdout) > MAX_OUTPUT_BYTES - 8192
    # one 40 MB line with no newline: its middle dropped, the exit marker after it still read
    assert one.exit_status == 0 and one.truncated and len(one.stdout) < 2 << 20
    assert one.stdout.rstrip("\n").endswith("yyfine")
    assert small.ok and small.stdout == "fine\n" and not small.truncated
    assert grown_mb < 120, f"RSS grew {grown_mb:.0f} MB reading 120 MB of node output"


@pytest.mark.parametrize("status", ["²", "9" * 5000, "٣", "1e400", "-", "0x0", ""])
def test_a_forged_exit_marker_with_a_number_int_refuses(standin_env: dict[str, str], status: str) -> None:
    # the node learns the random marker from its wrapper's argv and prints it with junk
    script = (FIND_MARKER + f'printf "%s exit %s\\n" "$m" "{status}"; '
              f'printf "%s exit %s\\n" "$m" "{status}" >&2; sleep 1')
    res, _ = run(script, ["n1"])
    r = res["n1"]
    assert r.error is None and r.exit_status == -1, r  # a status it could not read: not 0


def test_a_forged_node_marker_cannot_claim_another_node(standin_env: dict[str, str]) -> None:
    # task n1 claims to be n2 and exits 0 early; n2 really fails
    script = (FIND_MARKER + 'if [ "$SLURMD_NODENAME" = n1 ]; then printf "%s node n2\\n%s exit 0\\n" "$m" "$m"; '
              'printf "%s exit 0\\n" "$m" >&2; sleep 1; else exit 7; fi')
    res, _ = run(script, ["n1", "n2"])
    assert res["n2"].exit_status == 7, res["n2"]
    assert res["n1"].exit_status == 0


@pytest.mark.parametrize("label", ["²: x", "٣: x", "99999999999999999999: x", "-1: x"])
def test_unlabelled_or_odd_labels_are_srun_messages(standin_env: dict[str, str], label: str) -> None:
    res, _ = run(f"echo {label!r} >&2; echo ok", ["n1"])
    assert res["n1"].ok and res["n1"].stdout == "ok\n"


def test_a_report_with_a_node_nobody_heard_from_never_passes() -> None:
    report = Report("s", "multi-node", "srun", ["n1", "n2"])
    from clusterkit.preflight.report import NodeResult
    report.add(NodeResult("n1", True))
    assert report.exit_code() != 0
    decision = decide(report, "exclude")
    assert decision.refuse and "n2" in decision.exclude and "all nodes passed" not in decision.reason


SITE = """\
name: srun-hostile
scheduler: {kind: slurm, partition: debug}
nodes: {nodelist: "n[1-3]", gpus_per_node: 8, gpu_model: H100}
ssh: {command_timeout_s: 20}
software: {driver_min: "535.104", cuda: "12.4"}
"""


def _cli_env(tmp_path: Path, standin_env: dict[str, str], hostile_node: str) -> dict[str, str]:
    """The healthy profile's tools, and an nvidia-smi that kills its task's wrapper on one node."""
    root = tmp_path / "root"
    shutil.copytree(PROFILE / "root", root)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/bash\nif [ "$SLURMD_NODENAME" = {hostile_node} ]; then\n{KILL_WRAPPER}fi\n'
                   f'exec {PROFILE / "bin" / "nvidia-smi"} "$@"\n')
    smi.chmod(0o755)
    return {"PATH": f"{bin_dir}:{standin_env['PATH']}", "CLUSTERKIT_SYSROOT": str(root),
            "CK_STANDIN_TOOLKIT": standin_env["CK_STANDIN_TOOLKIT"]}


def test_preflight_cli_exits_non_zero_for_a_node_that_never_answered(ck: CLI, tmp_path: Path,
                                                                      standin_env: dict[str, str]) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(SITE)
    env = _cli_env(tmp_path, standin_env, "n2")
    proc = ck.proc("preflight", "--site", str(site), "--transport", "srun", "--json", env=env, timeout=120)
    assert proc.code == 3, proc.out + proc.err
    report = json.loads(proc.out)
    status = {n["host"]: n["status"] for n in report["nodes"]}
    assert status == {"n1": "ok", "n2": "unreachable", "n3": "ok"}, report
    assert report["unchecked"] == "" and report["exit_code"] == 3
    plain = ck.proc("preflight", "--site", str(site), "--transport", "srun", env=env, timeout=120)
    assert plain.code == 3 and "UNREACHABLE n2:" in plain.out, plain.out
