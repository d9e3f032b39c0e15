"""Recovery inside the allocation (clusterkit.supervise.replan and .attempts): a failed attempt's
verdict in, the next step out, no process.  The same runs end to end on the Slurm testbed in
tests/slurm/test_recovery.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from clusterkit.supervise import attempts, replan
from clusterkit.supervise.replan import Attempted, Relaunch, RequeueWithout, Stop, Verdict

NODES = ("node1", "node2", "node3")


def tried(**changes: object) -> Attempted:
    base: dict[str, object] = {"attempt": 0, "nodes": NODES, "unused": ("node4",), "max_relaunches": 3,
                               "restarts_left": 2}
    return Attempted(**{**base, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize("category", replan.RELAUNCH)
def test_a_nodes_fault_drops_the_node_and_a_spare_takes_its_place(category: str) -> None:
    step = replan.next_step(Verdict(category, "GPU has fallen off the bus", "node2"), [], tried())
    assert isinstance(step, Relaunch)
    assert step.nodes == ("node1", "node4", "node3")   # the spare in the dropped node's place
    assert [h for h, _ in step.dropped] == ["node2"]
    assert category in step.dropped[0][1] and "attempt 0" in step.dropped[0][1]
    assert not step.once


def test_with_the_allocation_known_the_new_nodes_keep_slurms_order_so_the_head_is_the_steps_node_0() -> None:
    """Slurm numbers a step's nodes in its own order whatever --nodelist says: the head (CK_HEAD, the
    first of the list) must be its node 0, where SLURM_PROCID 0 and --node_rank/--machine_rank 0 run."""
    alloc = ("node1", "node2", "node3", "node4")
    head_lost = replan.next_step(Verdict("gpu-hardware", "Xid 79", "node1"), [], tried(allocation=alloc))
    assert isinstance(head_lost, Relaunch) and head_lost.nodes == ("node2", "node3", "node4")
    middle = replan.next_step(Verdict("gpu-hardware", "Xid 79", "node2"), [], tried(allocation=alloc))
    assert isinstance(middle, Relaunch) and middle.nodes == ("node1", "node3", "node4")
    # the hostfile follows: each line names the node now at its place
    text = "node1 slots=8\nnode2 slots=8\nnode3 slots=8\n"
    assert replan.hostfile_for(text, NODES, head_lost.nodes) == "node2 slots=8\nnode3 slots=8\nnode4 slots=8\n"


@pytest.mark.parametrize("category", replan.STOP)
def test_a_failure_of_the_run_itself_stops_with_the_verdict(category: str) -> None:
    step = replan.next_step(Verdict(category, "KeyError: 'lr'", "node2"), ["node3"], tried())
    assert isinstance(step, Stop)
    assert step.reason.startswith(f"doctor: {category}: KeyError") and "not retried" in step.reason


def test_nodes_slurm_reports_down_are_dropped_too() -> None:
    step = replan.next_step(Verdict("nccl-timeout", "", None), ["node3"], tried(unused=("node4", "node5")))
    assert isinstance(step, Relaunch)
    assert step.nodes == ("node1", "node2", "node4") and [h for h, _ in step.dropped] == ["node3"]
    assert "Slurm reports it down" in step.dropped[0][1]
    both = replan.next_step(Verdict("gpu-hardware", "", "node2"), ["node3"], tried(unused=("node4", "node5")))
    assert isinstance(both, Relaunch) and both.nodes == ("node1", "node4", "node5")


def test_unknown_is_relaunched_once_on_the_same_nodes() -> None:
    first = replan.next_step(Verdict("unknown", "", None), [], tried())
    assert isinstance(first, Relaunch) and first.once and first.nodes == NODES and first.dropped == ()
    again = replan.next_step(Verdict("unknown", "", None), [], tried(attempt=1, unknown_used=True))
    assert isinstance(again, Stop) and "second failure" in again.reason
    # a node down is a node to blame: not the once-only path
    down = replan.next_step(Verdict("unknown", "", None), ["node2"], tried(attempt=1, unknown_used=True))
    assert isinstance(down, Relaunch) and not down.once


def test_a_node_the_verdict_names_outside_the_attempt_is_not_dropped() -> None:
    step = replan.next_step(Verdict("gpu-hardware", "", "fedora"), [], tried())
    assert isinstance(step, Relaunch) and step.dropped == () and step.nodes == NODES


def test_no_spare_left_requeues_without_the_bad_nodes_and_the_ones_kept_out_before() -> None:
    step = replan.next_step(Verdict("gpu-hardware", "", "node2"), [], tried(unused=(), excluded=("node5",)))
    assert isinstance(step, RequeueWithout)
    assert step.exclude == ("node5", "node2") and "0 spare(s) left" in step.line


def test_the_relaunch_budget_is_apart_from_the_restart_budget() -> None:
    spent = replan.next_step(Verdict("gpu-hardware", "", "node2"), [], tried(attempt=3))
    assert isinstance(spent, RequeueWithout) and "budget of 3 relaunches is spent" in spent.line
    no_restarts = replan.next_step(Verdict("gpu-hardware", "", "node2"), [], tried(unused=(), restarts_left=0))
    assert isinstance(no_restarts, Stop) and "restart budget is spent" in no_restarts.reason
    assert [h for h, _ in no_restarts.dropped] == ["node2"]


def test_sinfo_states_of_a_failing_node() -> None:
    out = "node1 mix\nnode2 down*\nnode3 alloc*\nnode4 drain\nnode5 idle\nnode9 down\nbroken line here\n"
    assert replan.failing_nodes(out, ("node1", "node2", "node3", "node4", "node5")) == ["node2", "node3", "node4"]


def test_doctors_json_read_as_data() -> None:
    good = json.dumps({"verdict": {"category": "gpu-hardware", "summary": "GPU\x1b[31m fell", "node": "node2"}})
    assert replan.verdict_from_doctor(good) == Verdict("gpu-hardware", "GPU fell", "node2")
    assert replan.verdict_from_doctor("not json").category == "unknown"
    bad = json.dumps({"verdict": {"category": "Rm -rf", "node": "node2"}})
    assert replan.verdict_from_doctor(bad).category == "unknown"
    odd_node = json.dumps({"verdict": {"category": "rendezvous", "summary": "", "node": "a b"}})
    assert replan.verdict_from_doctor(odd_node).node is None


def test_the_launch_is_rebuilt_for_the_new_nodes_and_attempt() -> None:
    argv = ("srun", "--nodes=3", "--nodelist=node1,node2,node3", "--output=/r/logs/%j.r0.%N.out",
            "bash", "-c", "exec torchrun", "clusterkit-launch", "python", "train.py", "--nodelist=keep")
    new = replan.relaunch_argv(argv, ("node1", "node4", "node3"), 1)
    assert new == ("srun", "--nodes=3", "--nodelist=node1,node4,node3", "--output=/r/logs/%j.r0.a1.%N.out",
                   "bash", "-c", "exec torchrun", "clusterkit-launch", "python", "train.py", "--nodelist=keep")
    assert new is not None
    again = replan.relaunch_argv(new, NODES, 2)
    assert again is not None and again[3] == "--output=/r/logs/%j.r0.a2.%N.out"
    assert replan.relaunch_argv(("bash", "-c", "x", "clusterkit-launch", "--nodelist=a"), NODES, 1) is None


def test_after_a_node_went_down_the_new_step_overlaps_the_old_one() -> None:
    """Slurm 22.05 never ends a step's part on a node that died (its slurmd gone): the old step keeps
    its GRES on the other nodes ("Requested nodes are busy" for ever), so the relaunch overlaps it."""
    down = replan.next_step(Verdict("unknown", "rank 0 failed first"), ["node2"], tried())
    assert isinstance(down, Relaunch) and down.overlap
    named = replan.next_step(Verdict("gpu-hardware", "Xid 79", "node2"), [], tried())
    assert isinstance(named, Relaunch) and not named.overlap
    argv = ("srun", "--nodes=3", "--nodelist=node1,node2,node3", "bash", "clusterkit-launch", "python", "t.py")
    new = replan.relaunch_argv(argv, ("node1", "node4", "node3"), 1, overlap=True)
    assert new == ("srun", "--nodes=3", "--nodelist=node1,node4,node3", "--overlap", "bash", "clusterkit-launch",
                   "python", "t.py")
    assert replan.relaunch_argv(new, NODES, 2, overlap=True) == (
        "srun", "--nodes=3", "--nodelist=node1,node2,node3", "--overlap", "bash", "clusterkit-launch", "python", "t.py")


def test_the_hostfile_keeps_each_lines_syntax() -> None:
    text = "node1 slots=8\nnode2 slots=8\nnode3 slots=8\n"
    new = replan.hostfile_for(text, NODES, ("node1", "node4", "node3"))
    assert new == "node1 slots=8\nnode4 slots=8\nnode3 slots=8\n"


def test_the_attempts_record_round_trips_and_a_forged_one_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    one = attempts.Attempt(0, NODES, 1, "gpu-hardware: fell off the bus", (("node2", "attempt 0: doctor"),), "relaunch")
    attempts.write(tmp_path, "77", 0, [one])
    assert attempts.read(tmp_path, "77") == [(0, one)]
    assert attempts.dropped(tmp_path, "77") == [("node2", "attempt 0: doctor")]
    forged = json.loads(attempts.path_for(tmp_path, "77", 0).read_text())
    forged["attempts"][0]["dropped"][0]["host"] = "../etc"
    attempts.path_for(tmp_path, "77", 1).write_text(json.dumps({**forged, "restart": 1}))
    attempts.path_for(tmp_path, "77", 2).write_text(json.dumps({**forged, "restart": 5}))
    assert attempts.read(tmp_path, "77") == [(0, one)]
    assert attempts.read(tmp_path, "../77") == []


def test_a_node_slurm_took_out_of_the_job_is_lost() -> None:
    shown = "JobId=7 JobName=x UserId=root(0) JobState=RUNNING NodeList=node[1,3-4] BatchHost=node1 ReqNodeList=(null)"
    assert replan.left_allocation(shown, ("node1", "node2", "node3", "node4")) == ["node2"]
    assert replan.left_allocation("JobId=7 JobState=PENDING NodeList=(null)", ("node1",)) is None


def test_an_unknown_verdict_blames_no_node() -> None:
    step = replan.next_step(Verdict("unknown", "no failure found", "node1"), [], tried())
    assert isinstance(step, Relaunch) and step.dropped == () and step.nodes == NODES


def test_a_rank_named_alone_is_placed_on_its_node_by_block_distribution() -> None:
    argv = ("srun", "--nodelist=node1,node2,node3", "--ntasks-per-node=2", "--output=/r/logs/%j.r0.rank%t.out",
            "bash", "clusterkit-launch", "x")
    per_node = ("srun", "--ntasks-per-node=1", "--output=/r/logs/%j.r0.%N.out", "clusterkit-launch")
    assert replan.node_of_rank(per_node, NODES, 1) is None   # torchrun's ranks are not Slurm tasks
    assert [replan.node_of_rank(argv, NODES, r) for r in (0, 1, 2, 3, 5, 6)] == [
        "node1", "node1", "node2", "node2", "node3", None]
    assert replan.node_of_rank(("srun", "--ntasks-per-node=2", "--output=x.rank%t.out", "--distribution=cyclic",
                                "clusterkit-launch"), NODES, 2) is None
    rank_only = json.dumps({"verdict": {"category": "gpu-hardware", "summary": "", "node": None, "rank": 3}})
    assert replan.verdict_from_doctor(rank_only).rank == 3


def test_no_requeue_without_a_node_the_job_asks_for_by_name() -> None:
    shown = "JobId=7 JobState=RUNNING ReqNodeList=node[1-2] ExcNodeList=(null) NodeList=node[1-2]"
    assert replan.requested(shown) == ("node1", "node2")
    step = replan.next_step(Verdict("rendezvous", "", "node2"), [], tried(nodes=("node1", "node2"), unused=(),
                                                                          pinned=replan.requested(shown)))
    assert isinstance(step, Stop) and "asks for node2 by name" in step.reason, step


def test_a_requeue_keeps_out_the_nodes_earlier_attempts_dropped(tmp_path: Path) -> None:
    from clusterkit.supervise import recovery

    run = recovery.Run("7", str(tmp_path), 0, ("node1", "node2", "node3", "node4"), NODES, (), 3)
    run.done.append(attempts.Attempt(0, NODES, 1, "gpu-hardware", (("node2", "attempt 0"),), "relaunch"))
    assert recovery.kept_out("JobId=7 ExcNodeList=node5 NodeList=node[1,3-4]", run) == ("node5", "node2")


def test_no_requeue_that_leaves_too_few_nodes_in_the_partition() -> None:
    fault = Verdict("rendezvous", "", "node2")
    step = replan.next_step(fault, [], tried(nodes=("node1", "node2"), unused=(), excluded=("node3", "node4"),
                                             partition=("node1", "node2", "node3", "node4")))
    assert isinstance(step, Stop) and "1 of the partition's 4 nodes remain for 2" in step.reason, step
    fits = replan.next_step(fault, [], tried(nodes=("node1", "node2"), unused=(),
                                             partition=("node1", "node2", "node3", "node4")))
    assert isinstance(fits, RequeueWithout)


def test_no_requeue_when_the_partition_cannot_hold_the_spares_an_attempt_used_up() -> None:
    """2 nodes + 1 spare on a 4-node partition: the spare took node2's place, then node3 failed too.
    The requeued job asks for its 3 nodes again (#SBATCH --nodes=3), and without node2 and node3 only
    2 remain: a requeue would pend for ever, so the run stops; on 5 nodes it requeues."""
    fault = Verdict("gpu-hardware", "Xid 79", "node3")
    alloc = ("node1", "node2", "node3")
    facts = tried(attempt=1, nodes=("node1", "node3"), unused=(), excluded=("node2",), allocation=alloc)
    step = replan.next_step(fault, [], replace(facts, partition=("node1", "node2", "node3", "node4")))
    assert isinstance(step, Stop) and "2 of the partition's 4 nodes remain for 3" in step.reason, step
    five = replan.next_step(fault, [], replace(facts, partition=("node1", "node2", "node3", "node4", "node5")))
    assert isinstance(five, RequeueWithout) and five.exclude == ("node2", "node3"), five


def test_logs_that_blame_nothing_beside_a_node_slurm_calls_down_are_that_nodes_failure() -> None:
    """A node that died (or lost its link) leaves no line in the ranks' logs: doctor finds nothing
    there, Slurm reports the node down.  The attempt's cause is the node's failure, doctor's kept."""
    quiet = Verdict("unknown", "no failure found in these logs")
    v = replan.with_slurm_facts(quiet, ["node2"])
    assert v.category == "slurm-node-failure" and v.node is None
    assert v.summary == ("Slurm reports node2 down or failing "
                         "(doctor on the ranks' logs: unknown: no failure found in these logs)")
    step = replan.next_step(v, ["node2"], tried())
    assert isinstance(step, Relaunch) and step.nodes == ("node1", "node4", "node3") and not step.once
    assert "attempt 0 failed (slurm-node-failure: Slurm reports node2 down" in step.line
    assert "dropped node2 (down in Slurm)" in step.line
    # what the logs do blame is kept: a node's fault, the run's own fault; nothing down: unchanged
    for kept in (Verdict("gpu-hardware", "Xid 79", "node3"), Verdict("user-code", "KeyError")):
        assert replan.with_slurm_facts(kept, ["node2"]) == kept
    assert replan.with_slurm_facts(quiet, []) == quiet
    many = replan.with_slurm_facts(quiet, [f"node{i}" for i in range(1, 12)])
    assert "node8 ... down or failing" in many.summary and len(many.summary) <= 300


# ---- placement by topology (network.topology): spares under the dropped node's switch


LEAVES = (("node1", "leaf1"), ("node2", "leaf1"), ("node3", "leaf2"), ("node4", "leaf2"), ("node5", "leaf1"))


def test_a_spare_under_the_dropped_nodes_switch_is_taken_first() -> None:
    alloc = ("node1", "node2", "node3", "node4", "node5")
    facts = tried(nodes=("node1", "node2", "node3"), unused=("node4", "node5"), allocation=alloc, switch_of=LEAVES)
    step = replan.next_step(Verdict("gpu-hardware", "Xid 79", "node2"), [], facts)
    assert isinstance(step, Relaunch)
    assert step.nodes == ("node1", "node5", "node3")   # node5 (leaf1) for node2 (leaf1), not node4 (leaf2)
    assert "spare(s) node5 take their place" in step.line
    # without the switches: the first spare, in Slurm's order, as before
    plain = replan.next_step(Verdict("gpu-hardware", "Xid 79", "node2"), [], replace(facts, switch_of=()))
    assert isinstance(plain, Relaunch) and plain.nodes == ("node1", "node3", "node4")


def test_with_no_spare_under_its_switch_the_first_spare_is_taken_and_the_nodes_stay_grouped() -> None:
    alloc = ("node1", "node2", "node3", "node4", "node5")
    facts = tried(nodes=("node1", "node5", "node3"), unused=("node2", "node4"), allocation=alloc, switch_of=LEAVES)
    step = replan.next_step(Verdict("gpu-hardware", "", "node3"), [], facts)
    # node3's switch leaf2 has node4 spare: taken; the list by switch, the first host (node1) first
    assert isinstance(step, Relaunch) and step.nodes == ("node1", "node5", "node4")
    two = replan.next_step(Verdict("gpu-hardware", "", "node1"), ["node3"], replace(facts, unused=("node2", "node4")))
    assert isinstance(two, Relaunch) and set(two.nodes) == {"node2", "node5", "node4"}
    assert two.nodes == ("node2", "node5", "node4")   # leaf1's together, then leaf2's


def test_pick_spares_prefers_the_switch_then_the_order() -> None:
    from clusterkit.topology import pick_spares
    group_of = dict(LEAVES)
    assert pick_spares(["node3", "node1"], ["node2", "node4", "node5"], group_of) == ["node4", "node2"]
    assert pick_spares(["node3", "node4"], ["node2", "node5"], group_of) == ["node2", "node5"]   # none under leaf2
    assert pick_spares(["node1", "node2"], ["node5"], group_of) == ["node5"]   # short: fewer
    assert pick_spares(["nodeX"], ["node4", "node5"], group_of) == ["node4"]   # a node under no switch


def test_the_supervisor_asks_slurm_for_the_switches_once_and_only_when_the_job_orders_by_them(tmp_path: Path) -> None:
    import subprocess

    from clusterkit.supervise import recovery
    from tests.captures.capture import captures
    body = next(c.body for c in captures("topology") if c.path.stem == "tree-22.05.8-two-leaves")
    calls: list[list[str]] = []

    def client(argv: list[str], timeout_s: float = 30, ignore_term: bool = False) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        assert ignore_term   # inside the job: Slurm's TERM must not end the question
        return subprocess.CompletedProcess(argv, 0, body, "")

    env = {"SLURM_JOB_NODELIST": "node[1-4]", "CK_NODELIST": "node1,node3", "CK_TOPOLOGY": "tree"}
    run = recovery.start(env, "7", str(tmp_path), 0, 3, lambda line: None)
    assert run is not None and run.by_switch
    want = (("node1", "leaf1"), ("node2", "leaf1"), ("node3", "leaf2"), ("node4", "leaf2"))
    assert recovery.switches(client, run) == want and recovery.switches(client, run) == want
    assert calls == [["scontrol", "show", "topology"]]
    plain = recovery.start({**env, "CK_TOPOLOGY": ""}, "7", str(tmp_path), 0, 3, lambda line: None)
    assert plain is not None and recovery.switches(client, plain) == () and len(calls) == 1
