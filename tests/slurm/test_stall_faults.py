"""More faults the supervisor's watch finds on the Slurm testbed, for real (3 nodes + 1 spare,
torchrun, the DDP loop over gloo of tests/slurm/recovery_train.py reporting its progress with
``clusterkit.progress``, as in tests/slurm/test_stall.py).

- node3's link drops every packet while it stays up (``tbf`` with a bucket smaller than any
  packet, on node3's interface and on its peer at the bridge: this kernel has no netem or drop
  action).  Every rank waits in its all-reduce; every heartbeat goes on (the run directory is on
  this machine's own disk), so the ranks' progress files name nobody.  The stack dumps do: the
  signal reaches every node but node3, whose rank alone gives none.  Found past the stall limit
  (within a bound only a broken watch reaches), node3 named and dropped, training resumes with
  the spare and ends with the weights of an uninterrupted run.  The link is restored once the
  attempt is over (Slurm itself would mark node3 down after its SlurmdTimeout of minutes).
- node3's CPU limited to 10 % of one CPU (its cgroup's quota, as tests/slurm/test_network_faults.py
  does) while the ranks hold before their first step, every rank doing the same matrix products
  per step (about 60 ms of one CPU here: more than the quota's 10 ms in each 100 ms, so every step
  of node3's is throttled, not just the one the quota runs out in) and reporting their time
  (``work_s``): ``status`` names node3 the straggler.

Every wait is for a state: a progress line, a line of the job's log, the job's end in ``status --json``.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from clusterkit import heartbeat

from .conftest import CK, Testbed
from .test_network_faults import _cpu_quota
from .test_recovery import TRAIN, _ended, _expected_weights, _text
from .test_spares import _env, _job_id, _site
from .test_stall import _hms

pytest.importorskip("torch", reason="the training loop needs torch (pip install torch, CPU build)")

# the first attempt trains until the cut stalls it (100000 steps: not 16 that may be over before
# the cut); the relaunch resumes at the last save and trains RESUMED_STEPS more
FLOOR_S, CUT_STEP, FOREVER, RESUMED_STEPS = 15, 8, 100000, 6
# the matrix products per step (--work): about 60 ms of one CPU here, several of the quota's 10 ms
# periods even on a core three times as fast (40, about 6 ms, fitted inside one period: most of
# node3's steps ran unthrottled, their median was the others', and no straggler was named)
WORK, SLOW_STEPS = 400, 12


@contextmanager
def _drop_every_packet(bed: Testbed, node: str) -> Iterator[None]:
    """Every packet node3 sends or is sent dropped, its link up: a token bucket of one byte."""
    ends = [("ip", "netns", "exec", bed.netns(node), "tc", "qdisc", "%s", "dev", bed.iface(node)),
            ("ip", "netns", "exec", bed.ctl_netns, "tc", "qdisc", "%s", "dev", f"vn{node.removeprefix('node')}")]
    for end in ends:
        subprocess.run([w.replace("%s", "add") for w in end] + ["root", "tbf", "rate", "8bit", "burst", "1",
                                                                 "latency", "1ms"], check=True, timeout=10)
    try:
        yield
    finally:
        for end in ends:
            subprocess.run([w.replace("%s", "del") for w in end] + ["root"], check=False, timeout=10)


def _until(what, timeout: float, about: str):   # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := what():
            return got
        time.sleep(0.2)
    raise AssertionError(f"{about}: not seen in {timeout} s")


@contextmanager
def _training_under_way(cli: CK, job: str, run_dir: Path, step: int = 0) -> Iterator[None]:
    """Wait until the job's rank 0 reports a step of at least ``step`` (a state, not a time); the job
    is cancelled however the block ends, so a failed test leaves no job holding the testbed."""
    try:
        progress = run_dir / "logs" / f"{job}.progress"
        _until(lambda: (p := heartbeat.read(progress)) is not None and p.step >= step, 180, "training under way")
        yield
    finally:
        cli.bed.run("scancel", job, check=False)


def test_a_node_whose_link_drops_every_packet_is_named_by_its_missing_stack_dump_and_dropped(
        cli: CK, tmp_path: Path) -> None:
    cli.bed.wait_idle()
    run_dir = cli.runs / "link"
    proc = cli("submit", "--site", str(_site(tmp_path)), "--stage", "multi-node", "--nodes", "3", "--spares", "1",
               "--gpus-per-node", "1", "--launcher", "torchrun", "--run-name", f"link-{time.time_ns()}",
               "--set", f"stall_floor_s={FLOOR_S}", "--set", "warmup_steps=2", "--out", str(run_dir), "--",
               "python", str(TRAIN), "--steps", str(FOREVER), "--resumed-steps", str(RESUMED_STEPS),
               "--step-s", "0.3", "--stall-on", "none",
               env=_env(cli, tmp_path, set()), timeout=120)
    assert proc.code == 0, proc.err
    job = _job_id(proc.out)
    with _training_under_way(cli, job, run_dir, CUT_STEP):
        with _drop_every_packet(cli.bed, "node3"):
            cut = time.time()   # for the figures: the bound is the 150 s wait, which only a broken watch reaches
            _until(lambda: "attempt 0 failed (stall" in _text(run_dir, "slurm-*.out"), 150, "the stall's verdict")
        st = _ended(cli, job)
    batch = _text(run_dir, "slurm-*.out")
    assert st["state"] == "COMPLETED", batch[-6000:]
    seen = re.search(r"clusterkit: (\d\d:\d\d:\d\d) watch: the run stalled: no progress since step (\d+) for "
                     r"(\d+) s, past the limit of (\d+) s: ending the launch step", batch)
    assert seen, batch[-6000:]
    after = (_hms(seen.group(1)) - int(cut) % 86400) % 86400
    assert int(seen.group(3)) >= int(seen.group(4)), seen.group(0)   # ended only past its limit
    print(f"link drop found {after} s after the cut (limit {seen.group(4)} s)",
          *re.findall(r"clusterkit: \d\d:\d\d:\d\d (?:watch|attempt 0).*", batch), sep="\n")
    assert re.search(r"watch: stack dumps: rank (\d+) on node3: no dump \(stopped, or not answering\); "
                     r"ranks \d+,\d+ on node1, node2: ", batch), batch[-6000:]
    [attempt] = cli.status(job)["attempts"]
    # node3 is named by its missing dump, or, where its rank's heartbeat thread stood still too (seen
    # on a loaded machine: the rank blocked in a send to the throttled link), by that: either names it
    assert re.search(r"node behind: node3 \(rank \d+: (no stack dump came while the others' did|its heartbeat "
                     r"stopped \d+ s ago while the other ranks' went on)\)", attempt["verdict"]), attempt
    assert [d["host"] for d in attempt["dropped"]] == ["node3"] and attempt["then"] == "relaunch", attempt
    second = _text(run_dir, f"{job}.r0.a1.*.out")
    assert set(re.findall(r" on (node\d) step \d+ loss", second)) == {"node1", "node2", "node4"}, second[-3000:]
    resumed = {int(r) for r in re.findall(r"resumed at step (\d+)", second)}
    assert len(resumed) == 1, second[-3000:]
    final = re.search(r"final weights (.*)", second)
    assert final, second[-3000:]
    assert [float(w) for w in final.group(1).split()] == pytest.approx(
        _expected_weights(steps=resumed.pop() + RESUMED_STEPS), abs=1e-4)


def test_a_node_limited_to_a_tenth_of_a_cpu_is_named_the_straggler(cli: CK, tmp_path: Path) -> None:
    cgroup = cli.bed.cgroup("node3")
    if cgroup is None:
        pytest.skip("no cpu cgroup controller here (neither cgroup v2 cpu nor v1 cpu)")
    cli.bed.wait_idle()
    run_dir = cli.runs / "slow"
    go = cli.runs / "slow-go"
    proc = cli("submit", "--site", "testbed", "--stage", "multi-node", "--nodes", "3", "--gpus-per-node", "1",
               "--launcher", "torchrun", "--run-name", f"slow-{time.time_ns()}", "--out", str(run_dir), "--",
               # every step under the quota: the ranks hold before their first until the test says so;
               # 12 steps, each rank's median over its last 12 (5 are enough for one, 20 the most)
               "python", str(TRAIN), "--steps", str(SLOW_STEPS), "--step-s", "0", "--work", str(WORK),
               "--hold", str(go),
               env=_env(cli, tmp_path, set()), timeout=120)
    assert proc.code == 0, proc.err
    job = _job_id(proc.out)
    try:
        _until(lambda: len(re.findall(r"rank \d+ on node\d holding", _text(run_dir))) == 3, 180, "3 ranks holding")
        with _cpu_quota(cgroup, 10):
            go.touch()
            st = _ended(cli, job)
    finally:
        go.touch()
        cli.bed.run("scancel", job, check=False)
    assert st["state"] == "COMPLETED", _text(run_dir, "slurm-*.out")[-6000:]
    slow = st["stragglers"]
    assert [s["node"] for s in slow] == ["node3"] and slow[0]["measure"] == "work", st
    assert slow[0]["ratio"] > st["straggler_ratio"], st
    shown = cli("status", job)
    said = r"straggler: node3 \(rank \d+: [0-9.]+ s of work per step, [0-9.]+x the others'"
    assert re.search(said, shown.out), shown.out
    print(f"straggler: {slow[0]}")
