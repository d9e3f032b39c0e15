"""``preflight --perf``'s reading and judging, on figure lines recorded from the 5-node testbed
(tests/data/captures/perf, written by ``bench/perf_preflight.py --capture``): the healthy run,
node3's link limited, node3's traffic to node4 only limited, node2's CPU limited (one sweep over
the pairings, as the worker measured before it made two), and the healthy run and node3's link
limited again with two sweeps (``*-sweeps``).  Cases the
testbed cannot make for real (a wrong checksum, a task that died) change one recorded line,
and say which."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clusterkit.config.load import load_site
from clusterkit.errors import ConfigError
from clusterkit.preflight.perf import Limits, judge, parse_output, srun_argv, task_errors
from clusterkit.preflight.perf_worker import boot_id, busbw_gbps, gemm_turns, pairings

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "captures" / "perf"
HOSTS = [f"node{i}" for i in range(1, 6)]
LIMITS = Limits(slow_ratio=0.5)  # the testbed sites' ratio (its figures vary run to run)


def _capture(name: str) -> tuple[str, list[str]]:
    lines = (CAPTURES / f"{name}.txt").read_text().splitlines()
    marker = next(ln.split(": ", 1)[1] for ln in lines if ln.startswith("# marker: "))
    return marker, [ln for ln in lines if not ln.startswith("#")]


def _judge(name: str, limits: Limits = LIMITS, edit: Any = None) -> Any:
    marker, lines = _capture(name)
    if edit is not None:
        lines = edit(marker, lines)
    return judge(HOSTS, parse_output(lines, marker, HOSTS), limits)


def _status(report: Any) -> dict[str, str]:
    return {n.host: n.status for n in report.nodes}


def _rewrite(lines: list[str], marker: str, pred: Any, change: Any) -> list[str]:
    """``lines`` with every figure line whose event matches ``pred`` changed by ``change``."""
    out = []
    for ln in lines:
        label, _, rest = ln.partition(": ")
        if rest.startswith(marker + " "):
            ev = json.loads(rest[len(marker) + 1:])
            if pred(ev):
                ev = change(ev)
                if ev is None:
                    continue
                ln = f"{label}: {marker} {json.dumps(ev)}"
        out.append(ln)
    return out


def test_nodes_that_share_a_kernel_take_turns_and_others_measure_at_once() -> None:
    nodes = ["a", "b", "c", "d", "e"]
    assert gemm_turns(nodes, {h: f"k-{h}" for h in nodes}) == [nodes]            # a real cluster: one turn
    assert gemm_turns(nodes, dict.fromkeys(nodes, "k")) == [[h] for h in nodes]  # a test cluster: one each
    # two machines of two "nodes" each and one of its own: two turns, never two of one kernel together
    turns = gemm_turns(nodes, {"a": "k1", "b": "k1", "c": "k2", "d": "k2", "e": "k3"})
    assert turns == [["a", "c", "e"], ["b", "d"]]
    assert gemm_turns(nodes, dict.fromkeys(nodes, "?")) == [nodes]               # unknown: a kernel each
    assert len(boot_id()) == 36   # this kernel's, a UUID


def test_pairings_are_disjoint_and_never_repeat() -> None:
    for n in range(2, 12):
        plan = pairings(n, 3)
        assert len(plan) == min(3, n - 1 if n % 2 == 0 else n)
        seen: set[tuple[int, int]] = set()
        for pairs in plan:
            members = [x for p in pairs for x in p]
            assert len(members) == len(set(members)) and len(pairs) == n // 2
            assert not seen & set(pairs)
            seen |= set(pairs)
        if n >= 3:  # every node in at least two pairs: slow node and slow link are told apart
            assert all(sum(i in p for ps in plan for p in ps) >= 2 for i in range(n)), (n, plan)


def test_busbw_is_nccl_tests_definition_in_gbit() -> None:
    # 1 GB in 1 s over 8 ranks: algbw 8 Gbit/s, busbw x 2*7/8
    assert busbw_gbps(10**9, 1.0, 8) == pytest.approx(8 * 2 * 7 / 8)
    assert busbw_gbps(10**9, 1.0, 2) == pytest.approx(8.0)


def test_recorded_healthy_run_is_all_ok() -> None:
    report = _judge("healthy")
    assert _status(report) == dict.fromkeys(HOSTS, "ok")
    assert report.slow_links == [] and int(report.exit_code()) == 0
    assert [len(r) for r in report.pairings] == [2, 2, 2]
    assert all(n.checksum_match for n in report.nodes)
    assert report.backend == "gloo" and report.startup_s and report.measure_s
    assert report.import_s and report.init_s and report.import_s <= report.startup_s
    assert report.to_dict()["perf"]["init_s"] == report.init_s


def test_recorded_limited_link_names_node3_only() -> None:
    report = _judge("node3-link-100mbit")
    assert _status(report) == {**dict.fromkeys(HOSTS, "ok"), "node3": "slow"}
    node3 = next(n for n in report.nodes if n.host == "node3")
    assert len(node3.busbw_inter_gbps) == 3 and "with every peer low" in node3.reason
    assert report.slow_links == [] and int(report.exit_code()) == 1


def test_recorded_limited_cpu_names_node2_in_the_compute_check() -> None:
    report = _judge("node2-cpu-5pct")
    assert report.nodes[1].status == "slow" and [n.host for n in report.nodes if n.status != "ok"] == ["node2"]
    assert any(c["check"] == "perf.gemm" for c in report.nodes[1].checks)


def test_site_minimum_makes_every_node_slow_below_it() -> None:
    report = _judge("healthy", Limits(gemm_tflops_min=1000.0, slow_ratio=0.5))
    assert set(_status(report).values()) == {"slow"}
    assert "the site's minimum 1000" in report.nodes[0].reason


def test_one_changed_checksum_is_wrong_result_on_that_node() -> None:
    """Changed: node4's checksum (the testbed cannot corrupt a matmul for real)."""
    report = _judge("healthy", edit=lambda m, lines: _rewrite(
        lines, m, lambda ev: ev["ev"] == "gemm" and ev["host"] == "node4", lambda ev: {**ev, "checksum": "1"}))
    assert _status(report) == {**dict.fromkeys(HOSTS, "ok"), "node4": "wrong-result"}
    assert report.nodes[3].checksum_match is False and "majority" in report.nodes[3].reason


def test_recorded_slowed_link_names_that_link_only() -> None:
    """node3's traffic to node4 only through a 500 Mbit/s htb class: node3-node4 (round 1) is low,
    node3's and node4's other pairs are not, so it is a slow link and no node is slow."""
    report = _judge("node3-node4-link-500mbit")
    assert _status(report) == dict.fromkeys(HOSTS, "ok")
    assert [(sorted(link["nodes"]), link["round"]) for link in report.slow_links] == [(["node3", "node4"], 1)]
    node3 = next(n for n in report.nodes if n.host == "node3")
    low = [p["peer"] for p in node3.busbw_inter_gbps if p["gbps"] < report.slow_links[0]["floor"]]
    assert low == ["node4"] and len(node3.busbw_inter_gbps) == 3
    assert int(report.exit_code()) == 1


def test_one_low_pair_is_a_slow_link_naming_both_ends() -> None:
    """Changed: the figures of the pair node3-node4 (round 1) divided by 10: a link, not a node."""
    marker, lines = _capture("healthy")
    pair = next(ev["pair"] for ev in parse_output(lines, marker, HOSTS)
                if ev["ev"] == "pair" and "node3" in ev["pair"] and "node4" in ev["pair"])
    report = _judge("healthy", edit=lambda m, ls: _rewrite(
        ls, m, lambda ev: ev["ev"] == "pair" and ev["pair"] == pair, lambda ev: {**ev, "gbps": ev["gbps"] / 10}))
    assert _status(report) == dict.fromkeys(HOSTS, "ok")
    assert [sorted(link["nodes"]) for link in report.slow_links] == [["node3", "node4"]]
    assert int(report.exit_code()) == 1


def test_recorded_two_sweeps_healthy_all_ok_and_the_limited_link_slow_in_both() -> None:
    """Recorded with two sweeps (the worker since perf_worker.PAIR_SWEEPS): the healthy run is all
    ok, and node3's 100 Mbit/s link is low in both sweeps of every pairing it is in."""
    healthy = _judge("healthy-sweeps")
    assert _status(healthy) == dict.fromkeys(HOSTS, "ok") and healthy.slow_links == [], healthy.to_dict()
    limited = _judge("node3-link-100mbit-sweeps")
    assert _status(limited) == {**dict.fromkeys(HOSTS, "ok"), "node3": "slow"}, limited.to_dict()
    node3 = limited.nodes[2].busbw_inter_gbps
    floor = 0.5 * limited.medians["busbw_inter_gbps"]
    assert len(node3) == 3 and all(len(p["sweeps"]) == 2 and max(p["sweeps"]) < floor for p in node3), node3
    assert all(len(p["sweeps"]) == 2 for n in limited.nodes for p in n.busbw_inter_gbps)


def _two_sweeps(lines: list[str], marker: str, first: Any, second: Any) -> list[str]:
    """The recorded pair figures as two sweeps: each pair line as sweep 1 changed by ``first``, then
    again as sweep 2 changed by ``second`` (the captures predate sweeps: one each)."""
    ones = _rewrite(lines, marker, lambda ev: ev["ev"] == "pair", lambda ev: first({**ev, "sweep": 1}))
    twos = [ln for ln in _rewrite(lines, marker, lambda ev: ev["ev"] == "pair", lambda ev: second({**ev, "sweep": 2}))
            if '"sweep"' in ln]
    return ones + twos


def test_a_node_held_down_in_one_sweep_only_is_not_slow_and_one_held_down_in_both_is() -> None:
    """Changed: the healthy run's pair figures recorded twice, as two sweeps; node2's pairings
    divided by 20 in one sweep (a burst of other work on node2 while it measured them), or in both
    (node2 slow for good)."""
    def held(ev: dict[str, Any]) -> dict[str, Any]:
        return {**ev, "gbps": ev["gbps"] / 20} if "node2" in ev["pair"] else ev

    once = _judge("healthy", edit=lambda m, ls: _two_sweeps(ls, m, held, lambda ev: ev))
    assert _status(once) == dict.fromkeys(HOSTS, "ok") and once.slow_links == [], once.to_dict()
    node2 = once.nodes[1].busbw_inter_gbps
    assert all(len(p["sweeps"]) == 2 and p["gbps"] == max(p["sweeps"]) > 10 * min(p["sweeps"]) for p in node2)
    both = _judge("healthy", edit=lambda m, ls: _two_sweeps(ls, m, held, held))
    assert _status(both) == {**dict.fromkeys(HOSTS, "ok"), "node2": "slow"}, both.to_dict()
    assert "with every peer low" in both.nodes[1].reason
    # a sweep number that is not one is no figure
    bad = _judge("healthy", edit=lambda m, ls: _two_sweeps(ls, m, held, lambda ev: {**ev, "sweep": "2"}))
    assert _status(bad)["node2"] == "slow"


def test_task_that_stopped_is_failed_with_its_last_words() -> None:
    """Changed: node5's figures after its matmul removed, as when its task dies there."""
    marker, lines = _capture("healthy")
    lines = _rewrite(lines, marker, lambda ev: ev["host"] == "node5" and ev["ev"] not in ("start", "init", "gemm"),
                     lambda ev: None)
    stderr, srun_lines = task_errors(["4: RuntimeError: Connection closed by peer [10.77.0.1]:41234",
                                      "srun: error: node5: task 4: Exited with exit code 1"])
    report = judge(HOSTS, parse_output(lines, marker, HOSTS), LIMITS, task_stderr=stderr, srun_lines=srun_lines)
    node5 = report.nodes[4]
    assert node5.status == "failed"
    assert node5.reason == ("task 4 stopped after its gemm figures: "
                            "RuntimeError: Connection closed by peer [10.77.0.1]:41234")


def test_node_where_no_task_started_is_unreachable_and_exit_3() -> None:
    marker, lines = _capture("healthy")
    lines = _rewrite(lines, marker, lambda ev: ev["host"] == "node2", lambda ev: None)
    report = judge(HOSTS, parse_output(lines, marker, HOSTS), LIMITS,
                   srun_lines=["srun: error: Task launch for StepId=1.0 failed on node node2: Communication error"])
    assert report.nodes[1].status == "unreachable" and int(report.exit_code()) == 3
    assert "node2: Communication error" in report.nodes[1].reason


def test_foreign_and_malformed_lines_are_not_figures() -> None:
    marker, lines = _capture("healthy")
    junk = [f"0: {marker} not json", f"0: {marker} {json.dumps({'ev': 'gemm', 'rank': 0, 'host': '../etc'})}",
            f"1: {marker} {json.dumps({'ev': 'start', 'rank': 0, 'host': 'node1'})}",  # label says task 1
            f"0: {marker} {json.dumps({'ev': 'gemm', 'rank': True, 'host': 'node1'})}",
            f"0: {marker} " + "x" * 5000, "0: @@ck-perf-other {}"]
    assert parse_output(junk, marker, HOSTS) == []
    assert len(parse_output(lines + junk, marker, HOSTS)) == len(parse_output(lines, marker, HOSTS))


def test_srun_step_runs_one_task_per_gpu_or_per_node(tmp_path: Path) -> None:
    site = tmp_path / "s.yaml"
    site.write_text('name: s\nscheduler: {kind: slurm}\nnodes: {nodelist: "gpu[01-04]", gpus_per_node: 8}\n')
    argv = srun_argv(load_site(str(site)), ["gpu01", "gpu02"], {"marker": "m"}, ["--mpi=pmix"], python="py")
    assert argv[:8] == ["srun", "--nodes", "2", "--ntasks", "16", "--ntasks-per-node", "8", "--nodelist"]
    assert "--gpus-per-task=1" in argv and argv[-5:] == ["--mpi=pmix", "py", "-m", "clusterkit.preflight.perf_worker",
                                                         '{"marker":"m"}']
    site.write_text(site.read_text() + "perf: {backend: gloo}\n")
    argv = srun_argv(load_site(str(site)), ["gpu01", "gpu02"], {"marker": "m"})
    assert argv[2:7] == ["2", "--ntasks", "2", "--ntasks-per-node", "1"] and "--gpus-per-task=1" not in argv


def test_the_step_fits_what_the_job_holds(tmp_path: Path) -> None:
    """One CPU a task with --overcommit (never the job's own --cpus-per-task, never more CPUs than
    it holds), and inside a job one task per GPU the job holds where it holds fewer than the site's."""
    from clusterkit.preflight.perf import tasks_per_node

    site = tmp_path / "s.yaml"
    site.write_text('name: s\nscheduler: {kind: slurm}\nnodes: {nodelist: "gpu[01-04]", gpus_per_node: 8}\n')
    config = load_site(str(site))
    argv = srun_argv(config, ["gpu01"], {"marker": "m"})
    assert argv[argv.index("--cpus-per-task") + 1] == "1" and "--overcommit" in argv
    assert tasks_per_node(config) == 8 and tasks_per_node(config, {}) == 8
    assert tasks_per_node(config, {"SLURM_JOB_ID": "7", "SLURM_GPUS_PER_NODE": "h100:2"}) == 2
    assert tasks_per_node(config, {"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "1"}) == 1
    assert tasks_per_node(config, {"SLURM_GPUS_PER_NODE": "1"}) == 8   # not inside a job
    assert tasks_per_node(config, {"SLURM_JOB_ID": "7", "SLURM_GPUS_PER_NODE": "16"}) == 8


def test_bad_perf_key_is_a_file_line_error(tmp_path: Path) -> None:
    site = tmp_path / "s.yaml"
    site.write_text('name: s\nnodes: {nodelist: "n1", gpus_per_node: 1}\nperf:\n  slow_ratio: 1.5\n  rounds: 1\n')
    with pytest.raises(ConfigError) as info:
        load_site(str(site))
    text = str(info.value)
    assert f"{site}:4" in text and "perf.slow_ratio" in text
    assert f"{site}:5" in text and "perf.rounds" in text


def test_every_task_failing_alike_is_the_checks_fault_and_no_node_is_bad() -> None:
    """Each task's start and then the same error (what perf_worker prints where torch is missing)."""
    marker = "@@ck-perf-0"
    err = "ModuleNotFoundError: No module named 'torch'"
    lines = [f"{r}: {marker} {json.dumps({'ev': ev, 'rank': r, 'host': h, **extra})}"
             for r, h in enumerate(HOSTS) for ev, extra in (("start", {}), ("error", {"error": err}))]
    report = judge(HOSTS, parse_output(lines, marker, HOSTS), LIMITS)
    assert _status(report) == {h: "unjudged" for h in HOSTS} and int(report.exit_code()) == 1
    assert report.common_fault == f"task 0: {err}"
    data = report.to_dict()
    assert data["failed"] == "" and data["unreachable"] == "" and data["counts"]["unjudged"] == 5
    # one node alone failing that way is that node's own trouble
    alone = judge(HOSTS[:1], parse_output(lines[:2], marker, HOSTS[:1]), LIMITS)
    assert _status(alone) == {"node1": "failed"} and alone.common_fault is None


def test_a_step_srun_refused_as_a_whole_is_the_checks_fault_on_one_node_too() -> None:
    # srun's line as a public salloc/srun transcript shows it (2021: `srun -l --ntasks 8 -c 1 hostname`
    # inside `salloc -w node05 -n 2`)
    refused = "srun: error: Unable to create step for job 99825: More processors requested than permitted"
    for hosts in (HOSTS, HOSTS[:1]):
        report = judge(hosts, [], LIMITS, srun_lines=task_errors([refused])[1])
        assert {n.status for n in report.nodes} == {"unjudged"}, report.to_dict()
        assert report.common_fault == refused and int(report.exit_code()) == 1
    # srun naming the node it could not reach: that node's fault
    report = judge(HOSTS[:1], [], LIMITS, srun_lines=["srun: error: Task launch for StepId=1.0 failed on node "
                                                      "node1: Communication error"])
    assert _status(report) == {"node1": "unreachable"} and report.common_fault is None
