"""Recovery inside the allocation on the Slurm testbed, for real: 3 nodes + 1 spare, torchrun (and
srun and deepspeed for the Xid 79, the node's death and its link cut), a DDP loop over gloo
(tests/slurm/recovery_train.py) that checkpoints to CK_CHECKPOINT_DIR every few steps and resumes
from it.

- a rank on node2 prints the lines a real Xid 79 left in a log (the doctor corpus's capture)
  and exits mid-run: the supervisor drops node2, the spare takes its place, training resumes
  at the saved step in the same job, the final weights are those of an uninterrupted run;
- node2 set DOWN mid-run (scontrol): the allocation survives (--no-kill) and the same happens;
- node2 dies mid-run (its slurmd and every process on it killed at once): slurmctld sets it DOWN
  when it stops answering (SlurmdTimeout, lowered for the test), and the same happens;
- node2's link set down in its network namespace mid-run: the same;
- a KeyError in the training script: not retried, FAILED with user-code;
- the rank on node2 killed by the kernel's OOM killer (it joins a memory cgroup with a limit the
  test made and allocates past it): not retried, FAILED with host-oom.

Every wait is for a state: a line in a rank's log, the job's state in ``status --json``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .conftest import CK, REPO, Testbed
from .test_spares import _env, _job_id, _site

torch = pytest.importorskip("torch", reason="the training loop needs torch (pip install torch, CPU build)")

TRAIN = REPO / "tests" / "slurm" / "recovery_train.py"
XID79 = REPO / "tests" / "diagnose" / "corpus" / "akash-209-xid79.log"   # real dmesg of an Xid 79
STEPS, WORLD = 30, 3
# the slow steps are there for the fault to land mid-run; once resumed from the checkpoint the
# loop goes at full speed (what is checked after the fault: the step resumed at, the weights)
FAST_RESUME = ("--resumed-step-s", "0")
# a fault the test sets off mid-run lands on a first attempt that trains until it is relaunched
# (a large --steps; not 30 steps that may be over before the fault is handled), then the
# relaunch trains RESUMED_STEPS more: the weights are those of the step it resumed at plus these
RESUMED_STEPS = 12
UNTIL_RELAUNCHED = ("--resumed-steps", str(RESUMED_STEPS))
FOREVER = 100000
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")


def _expected_weights(world: int = WORLD, steps: int = STEPS) -> list[float]:
    """The weights of the same loop run without a fault: gradients averaged over the ranks."""
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(steps):
        grads = []
        for rank in range(world):
            x = torch.randn(32, 16, generator=torch.Generator().manual_seed(step * 1000 + rank))
            model.zero_grad()
            model(x).pow(2).mean().backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            p.grad = sum(g[i] for g in grads) / world
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()


def _submit(cli: CK, tmp_path: Path, name: str, *train: str, launcher: str = "torchrun",
            steps: int = STEPS) -> tuple[str, Path]:
    site, run_dir = _site(tmp_path), cli.runs / name
    proc = cli("submit", "--site", str(site), "--stage", "multi-node", "--nodes", "3", "--spares", "1",
               "--gpus-per-node", "1", "--launcher", launcher, "--run-name", f"recovery-{name}-{time.time_ns()}",
               "--out", str(run_dir), "--", "python", str(TRAIN), "--steps", str(steps), *train,
               env=_env(cli, tmp_path, set()), timeout=120)
    assert proc.code == 0, proc.err
    return _job_id(proc.out), run_dir


def _text(run_dir: Path, pattern: str = "*.out") -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").glob(pattern)))


def _await_line(run_dir: Path, needle: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in _text(run_dir):
            return
        time.sleep(0.3)
    raise AssertionError(f"{needle!r} not in the logs after {timeout}s:\n{_text(run_dir)[-4000:]}")


def _ended(cli: CK, job: str) -> dict:
    return cli.wait_for(job, lambda s: s["state"] in TERMINAL, timeout=300, what="the job's end")


def _check_recovered(cli: CK, tmp_path: Path, job: str, run_dir: Path, why: str, short: str,
                     until_relaunched: bool = False) -> None:
    st = _ended(cli, job)
    batch = _text(run_dir, "slurm-*.out")
    assert st["state"] == "COMPLETED", batch[-6000:]
    # one job, one allocation: no requeue, the relaunch is attempt 1 with the spare instead of node2
    assert "restart 1 of" not in batch, batch[-6000:]
    assert re.search(rf"attempt 0 failed \(.*\): dropped node2 \({short}\); spare\(s\) node4 take their "
                     r"place: relaunching \(relaunch 1 of 3\)", batch), batch[-6000:]
    second = _text(run_dir, f"{job}.r0.a1.*.out")
    resumed = {int(s) for s in re.findall(r"resumed at step (\d+)", second)}
    first = "".join(p.read_text(errors="replace") for p in (run_dir / "logs").glob(f"{job}.r0.*.out")
                    if ".r0.a" not in p.name)
    saved = [int(s) for s in re.findall(r"rank 0 saved step (\d+)", first)]
    assert saved and resumed == {max(saved)}, (resumed, saved)
    hosts = set(re.findall(r"rank \d+/3 on (\S+) step", second))
    assert hosts == {"node1", "node3", "node4"}, hosts
    final = re.search(r"final weights (.*)", second)
    assert final, second[-3000:]
    got = [float(w) for w in final.group(1).split()]
    steps = max(saved) + RESUMED_STEPS if until_relaunched else STEPS
    assert got == pytest.approx(_expected_weights(steps=steps), abs=1e-4)
    # the record names node2 and why; status shows each attempt; --exclude-from keeps node2 out
    out = cli.status(job)
    [attempt] = out["attempts"]
    assert attempt["nodes"] == ["node1", "node2", "node3"] and attempt["then"] == "relaunch"
    assert [d["host"] for d in attempt["dropped"]] == ["node2"], attempt
    assert re.search(why, attempt["dropped"][0]["why"]), attempt
    assert any(d["host"] == "node2" for d in out["dropped"]), out["dropped"]
    # the run's account lists the failure inside the allocation with its verdict and the node
    # dropped; this loop reports no progress, so no time is split (unreported, none lost)
    got = cli("status", job, "--run", "--json", timeout=60)
    assert got.code == 0, got.err
    run = json.loads(got.out)["run"]
    [failure] = run["causes"]["failures"]
    assert failure["what"] == "attempt 0 (relaunched)" and failure["dropped"] == ["node2"], failure
    assert failure["verdict"] == attempt["verdict"] and failure["job_id"] == job and failure["restart"] == 0
    assert failure["lost_s"] == 0 and failure["checkpoint"] is None
    assert run["causes"]["allocated_s"] > 0
    assert run["causes"]["unreported_s"] == pytest.approx(run["causes"]["allocated_s"])
    shown = cli("status", job, timeout=60)
    assert re.search(r"attempt 0 \(restart 0\) on node1,node2,node3: status \d+, .*; then relaunch",
                     shown.out), shown.out
    again = cli("submit", "--site", str(_site(tmp_path)), "--stage", "multi-node", "--nodes", "2",
                "--gpus-per-node", "1", "--launcher", "torchrun", "--exclude-from", job, "--out",
                str(cli.runs / "again"), "--dry-run", "--", "python", str(TRAIN), env=cli.env())
    assert again.code == 0, again.err
    assert "#SBATCH --exclude=node2\n" in (cli.runs / "again" / "job.sbatch").read_text()


@pytest.mark.parametrize("launcher", ["torchrun", "srun", "deepspeed"])
def test_a_gpu_that_fell_off_the_bus_is_dropped_and_training_resumes_on_the_spare(
        cli: CK, tmp_path: Path, launcher: str) -> None:
    cli.bed.wait_idle()
    job, run_dir = _submit(cli, tmp_path, "xid79", "--gpu-fault-on", "node2", "--gpu-fault-log", str(XID79),
                           *FAST_RESUME, launcher=launcher)
    try:
        _check_recovered(cli, tmp_path, job, run_dir, "gpu-hardware", "gpu-hardware")
    finally:
        cli.bed.run("scancel", job, check=False)


def test_a_node_set_down_mid_run_leaves_the_allocation_and_training_resumes(cli: CK, tmp_path: Path) -> None:
    cli.bed.wait_idle()
    job, run_dir = _submit(cli, tmp_path, "down", *UNTIL_RELAUNCHED, "--step-s", "0.5", *FAST_RESUME, steps=FOREVER)
    _await_line(run_dir, "rank 0 saved step 6")
    cli.bed.run("scontrol", "update", "NodeName=node2", "State=DOWN", "Reason=clusterkit-recovery-test")
    try:
        _check_recovered(cli, tmp_path, job, run_dir, "Slurm reports it down", "down in Slurm",
                         until_relaunched=True)
    finally:
        cli.bed.run("scancel", job, check=False)
        cli.bed.resume("node2")


def test_a_key_error_in_the_training_script_is_not_retried(cli: CK, tmp_path: Path) -> None:
    cli.bed.wait_idle()
    job, run_dir = _submit(cli, tmp_path, "keyerror", "--key-error")
    try:
        st = _ended(cli, job)
    finally:
        cli.bed.run("scancel", job, check=False)
    batch = _text(run_dir, "slurm-*.out")
    assert st["state"] == "FAILED", batch[-6000:]
    assert "doctor: user-code" in batch and "not retried" in batch, batch[-6000:]
    assert "relaunching" not in batch and not list((run_dir / "logs").glob(f"{job}.r0.a1.*")), batch[-6000:]
    [attempt] = cli.status(job)["attempts"]
    assert attempt["verdict"].startswith("user-code") and attempt["then"] == "stop" and attempt["dropped"] == []



# A node that stops answering is set DOWN by slurmctld SlurmdTimeout seconds after its last answer
# (300 s by default, and the link-cut test of test_perf_spares.py needs it long): lowered for the
# tests below alone, through `scontrol reconfigure`, and restored after them (6 s: a healthy node
# answers slurmctld's pings, every SlurmdTimeout/3 seconds, at once).
DEAD_AFTER_S = 6


@contextmanager
def _slurmd_timeout(bed: Testbed, seconds: int) -> Iterator[None]:
    confs = [bed.slurm_conf, bed.slurm_conf.with_name("slurm-nodes.conf")]   # the nodes' copy too
    kept = [c.read_text() for c in confs]
    for conf, text in zip(confs, kept, strict=True):
        conf.write_text(f"{text}SlurmdTimeout={seconds}\n")   # in place: the nodes see it through a bind mount
    try:
        bed.run("scontrol", "reconfigure")
        shown = bed.run("scontrol", "show", "config").stdout
        assert re.search(rf"^SlurmdTimeout\s*= {seconds} sec", shown, re.M), shown
        yield
    finally:
        for conf, text in zip(confs, kept, strict=True):
            conf.write_text(text)
        bed.run("scontrol", "reconfigure")


def _back(bed: Testbed, node: str) -> None:
    """Wait until ``node`` answers slurmctld again and runs jobs (ReturnToService=2 returns a node
    set DOWN for not answering once it registers), then lift any DOWN left."""
    deadline = time.monotonic() + 90
    while (state := bed.node_state(node)) not in ("idle", "allocated", "mixed", "completing"):
        if state.startswith("down") and not state.endswith("*"):
            bed.resume(node)
        assert time.monotonic() < deadline, f"{node} did not come back: {state}"
        time.sleep(0.5)


def _kill_node(bed: Testbed, node: str) -> int:
    """The node dies: its slurmd and every process it started (the node's cgroup) get SIGKILL,
    and the testbed's supervisor leaves slurmd down (its ``.held`` mark).  How many were killed."""
    cgroup = bed.cgroup(node)
    assert cgroup is not None
    (bed.lab / "run" / f"slurmd-{node}.held").touch()
    killed: set[int] = set()
    deadline = time.monotonic() + 10
    while pids := [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        assert time.monotonic() < deadline, f"processes of {node} still alive: {pids}"
        time.sleep(0.05)
    return len(killed)


def _revive(bed: Testbed, node: str) -> None:
    """slurmd started again on ``node`` (the supervisor does it within a second of the mark's removal)."""
    (bed.lab / "run" / f"slurmd-{node}.held").unlink(missing_ok=True)
    _back(bed, node)


@pytest.mark.parametrize("launcher", ["torchrun", "srun", "deepspeed"])
def test_a_node_that_dies_mid_run_is_dropped_and_training_resumes(cli: CK, tmp_path: Path, launcher: str) -> None:
    if cli.bed.cgroup("node2") is None:
        pytest.skip("no cgroup holds a testbed node's processes here (neither cgroup v2 cpu nor v1 cpu)")
    cli.bed.wait_idle()
    with _slurmd_timeout(cli.bed, DEAD_AFTER_S):
        job, run_dir = _submit(cli, tmp_path, "dead", *UNTIL_RELAUNCHED, "--step-s", "0.5", *FAST_RESUME,
                               steps=FOREVER, launcher=launcher)
        try:
            _await_line(run_dir, "rank 0 saved step 6")
            assert _kill_node(cli.bed, "node2") >= 3   # slurmd, slurmstepd, the rank (and torchrun or deepspeed)
            _check_recovered(cli, tmp_path, job, run_dir, "Slurm reports it down|doctor: ", r"[A-Za-z -]+",
                             until_relaunched=True)
            assert cli.bed.node_state("node2").startswith("down"), cli.bed.node_state("node2")
        finally:
            cli.bed.run("scancel", job, check=False)
            _revive(cli.bed, "node2")


@pytest.mark.parametrize("launcher", ["torchrun", "srun", "deepspeed"])
def test_a_nodes_link_cut_mid_run_is_dropped_and_training_resumes(cli: CK, tmp_path: Path, launcher: str) -> None:
    cli.bed.wait_idle()
    link = ["ip", "-n", cli.bed.netns("node2"), "link", "set", cli.bed.iface("node2")]
    with _slurmd_timeout(cli.bed, DEAD_AFTER_S):
        job, run_dir = _submit(cli, tmp_path, "cut", *UNTIL_RELAUNCHED, "--step-s", "0.5", *FAST_RESUME,
                               steps=FOREVER, launcher=launcher)
        try:
            _await_line(run_dir, "rank 0 saved step 6")
            subprocess.run([*link, "down"], check=True, capture_output=True, timeout=10)
            _check_recovered(cli, tmp_path, job, run_dir, "Slurm reports it down|doctor: ", r"[A-Za-z -]+",
                             until_relaunched=True)
        finally:
            subprocess.run([*link, "up"], capture_output=True, timeout=10)
            cli.bed.run("scancel", job, check=False)
            _back(cli.bed, "node2")
            cli.bed.steps_gone("node2", job)   # node2 still ran its part of the job, cut off from it


MEMORY_CGROUP = Path("/sys/fs/cgroup/memory")   # cgroup v1's memory hierarchy (v2: the unified root)


@contextmanager
def _memory_cgroup(limit_mb: int) -> Iterator[Path]:
    """A memory cgroup of its own with a hard limit, removed after (the kernel moves nothing into it)."""
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    root = Path("/sys/fs/cgroup") if v2.exists() and "memory" in v2.read_text().split() else MEMORY_CGROUP
    if not (root / "cgroup.procs").exists():
        pytest.skip("no memory cgroup controller here (neither cgroup v2 memory nor v1 memory)")
    path = root / f"clusterkit-oom-{os.getpid()}-{time.time_ns()}"
    path.mkdir()
    try:
        (path / ("memory.max" if root != MEMORY_CGROUP else "memory.limit_in_bytes")).write_text(f"{limit_mb << 20}\n")
        yield path
    finally:
        deadline = time.monotonic() + 30
        while path.exists():
            try:
                path.rmdir()
            except OSError:   # busy until the killed rank is reaped
                assert time.monotonic() < deadline, f"{path} still busy"
                time.sleep(0.2)


def test_a_rank_the_kernels_oom_killer_ends_is_not_retried(cli: CK, tmp_path: Path) -> None:
    with _memory_cgroup(256) as cgroup:
        cli.bed.wait_idle()
        job, run_dir = _submit(cli, tmp_path, "oom", "--oom-on", "node2", "--oom-cgroup", str(cgroup))
        try:
            st = _ended(cli, job)
        finally:
            cli.bed.run("scancel", job, check=False)
        failcnt = cgroup / ("memory.events" if (cgroup / "memory.events").exists() else "memory.oom_control")
        killed = re.search(r"oom_kill (\d+)", failcnt.read_text())
    assert killed and int(killed.group(1)) >= 1, "the kernel's OOM killer killed nothing in the test's cgroup"
    batch = _text(run_dir, "slurm-*.out")
    assert st["state"] == "FAILED", batch[-6000:]
    assert "doctor: host-oom" in batch and "not retried" in batch, batch[-6000:]
    assert "relaunching" not in batch and not list((run_dir / "logs").glob(f"{job}.r0.a1.*")), batch[-6000:]
    assert "holding " in _text(run_dir, f"{job}.r0.node2.out")
    [attempt] = cli.status(job)["attempts"]
    assert attempt["verdict"].startswith("host-oom") and attempt["then"] == "stop" and attempt["dropped"] == []
