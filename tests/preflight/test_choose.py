"""The job's choice of nodes from its preflight report (clusterkit.preflight.choose): which nodes
are dropped, how good ones are ranked, and how a report or selection from outside is validated."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clusterkit.preflight import choose as ch


def _write(tmp_path: Path, nodes: list[dict], name: str = "report.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"version": 1, "nodes": nodes}))
    return path


def _ok(host: str, **figures: float) -> dict:
    return {"host": host, "status": "ok", "checks": [], **({"figures": figures} if figures else {})}


def _pick(verdicts: dict, alloc: list[str], wanted: int, spares: int, **kw) -> ch.Selection:  # type: ignore[no-untyped-def]
    return ch.choose(verdicts, alloc, wanted=wanted, spares=spares, job_id="77", restart=0, **kw)


def test_failed_and_unreachable_nodes_are_dropped_and_order_kept(tmp_path: Path) -> None:
    report = _write(tmp_path, [
        _ok("n1"),
        {"host": "n2", "status": "failed", "checks": [
            {"check": "gpu.count", "status": "fail", "message": "7 GPUs, expected 8"},
            {"check": "gpu.driver", "status": "pass", "message": "550"}]},
        {"host": "n3", "status": "unreachable", "error": "srun: task never answered"},
        {"host": "n4", "status": "warn", "checks": []}, _ok("n5")])
    sel = _pick(ch.read_report(report), ["n1", "n2", "n3", "n4", "n5"], 3, 2)
    assert sel.outcome == "launch" and sel.chosen == ("n1", "n4", "n5") and sel.unused == ()
    assert [(v.host, v.verdict, v.reason) for v in sel.dropped] == [
        ("n2", "failed", "gpu.count: 7 GPUs, expected 8"), ("n3", "unreachable", "srun: task never answered")]


def test_good_nodes_beyond_the_count_are_unused_spares(tmp_path: Path) -> None:
    sel = _pick(ch.read_report(_write(tmp_path, [_ok("n1"), _ok("n2"), _ok("n3")])), ["n1", "n2", "n3"], 2, 1)
    assert sel.chosen == ("n1", "n2") and sel.unused == ("n3",) and sel.dropped == ()


def test_perf_figures_rank_the_good_nodes_and_the_worst_figure_counts(tmp_path: Path) -> None:
    nodes = [_ok("n1", gemm_tflops=10.0, busbw_inter_gbps=5.0),   # fast GEMM, slow link: 0.5 of median
             _ok("n2", gemm_tflops=9.0, busbw_inter_gbps=10.0),
             _ok("n3", gemm_tflops=9.5, busbw_inter_gbps=9.0),
             _ok("n4", gemm_tflops=9.8, busbw_inter_gbps=11.0)]
    sel = _pick(ch.read_report(_write(tmp_path, nodes)), ["n1", "n2", "n3", "n4"], 3, 1)
    assert sel.chosen == ("n2", "n3", "n4") and sel.unused == ("n1",)   # chosen keep allocation order


def test_figures_at_the_nodes_own_level_count_but_not_its_check_time(tmp_path: Path) -> None:
    report = _write(tmp_path, [{"host": "n1", "status": "slow", "duration_s": 0.28, "gemm_tflops": 3.5,
                                "busbw_inter_gbps": 9}])
    assert ch.read_report(report)["n1"].figures == {"gemm_tflops": 3.5, "busbw_inter_gbps": 9.0}


def test_a_perf_report_node_gives_its_reason_once_and_its_lowest_pair_bandwidth(tmp_path: Path) -> None:
    """A node as ``preflight --perf --json`` writes it: figures at its own level, one busbw per pairing."""
    node = {"host": "n3", "status": "slow", "reachable": True, "reason": "inter-node busbw 0.9 Gbit/s below 2.1",
            "gemm_tflops": 0.41, "busbw_intra_gbps": None, "checksum_match": True,
            "busbw_inter_gbps": [{"round": 0, "peer": "n1", "gbps": 0.9}, {"round": 1, "peer": "n2", "gbps": 1.2}],
            "checks": [{"check": "perf.inter", "status": "fail", "message": "inter-node busbw 0.9 Gbit/s below 2.1"}]}
    [v] = ch.read_report(_write(tmp_path, [node])).values()
    assert v.reason == "inter-node busbw 0.9 Gbit/s below 2.1"
    assert v.figures == {"gemm_tflops": 0.41, "busbw_inter_gbps": 0.9}


def test_figures_missing_on_some_good_node_keep_allocation_order(tmp_path: Path) -> None:
    nodes = [_ok("n1", gemm_tflops=1.0), _ok("n2"), _ok("n3", gemm_tflops=9.0)]
    assert _pick(ch.read_report(_write(tmp_path, nodes)), ["n1", "n2", "n3"], 2, 1).chosen == ("n1", "n2")


def test_a_node_missing_from_the_report_is_unchecked_and_others_are_ignored(tmp_path: Path) -> None:
    report = _write(tmp_path, [_ok("n1"), _ok("elsewhere"), {"host": "n9", "status": "failed"}])
    sel = _pick(ch.read_report(report), ["n1", "n2"], 1, 1)
    assert sel.chosen == ("n1",)
    assert [(v.host, v.verdict) for v in sel.dropped] == [("n2", "unchecked")]


def test_too_few_good_nodes_with_spares_ends_naming_them(tmp_path: Path) -> None:
    report = _write(tmp_path, [{"host": "n1", "status": "slow", "reason": "gemm 0.5x median",
                                "figures": {"gemm_tflops": 4.0}},
                               {"host": "n2", "status": "failed", "error": "nvidia-smi failed"}, _ok("n3")])
    sel = _pick(ch.read_report(report), ["n1", "n2", "n3"], 2, 1, restarts_left=0, resubmit="clusterkit submit X")
    assert sel.outcome == "end" and sel.chosen == ()
    assert sel.reason == ("perf check: 2 nodes below par, 1 spares: n1 (slow: gemm 0.5x median), "
                          "n2 (failed: nvidia-smi failed); resubmit without them: clusterkit submit X")
    assert sel.dropped[0].figures == {"gemm_tflops": 4.0}


def test_more_bad_nodes_than_spares_requeue_while_restarts_last_and_the_site_has_room(tmp_path: Path) -> None:
    verdicts = ch.read_report(_write(tmp_path, [{"host": "n1", "status": "failed"},
                                                {"host": "n2", "status": "failed"}, _ok("n3")]))
    sel = _pick(verdicts, ["n1", "n2", "n3"], 2, 1, restarts_left=2, site_nodes=5)
    assert sel.outcome == "requeue" and sel.exclude == ("n1", "n2")
    # the requeued job asks for 2 nodes and 1 spare again: 3 of the site's 5 remain without n1, n2
    stuck = _pick(verdicts, ["n1", "n2", "n3"], 2, 1, restarts_left=2, site_nodes=4)
    assert stuck.outcome == "end"
    assert "; not requeued: without them 2 of the site's 4 nodes remain for 2 and 1 spare(s)" in stuck.reason


def test_without_spares_a_bad_node_asks_for_a_requeue_while_restarts_last(tmp_path: Path) -> None:
    verdicts = ch.read_report(_write(tmp_path, [_ok("n1"), {"host": "n2", "status": "failed"}]))
    sel = _pick(verdicts, ["n1", "n2"], 2, 0, restarts_left=1, exclude=["n7"])
    assert sel.outcome == "requeue" and sel.exclude == ("n2", "n7")
    assert sel.reason == "preflight: 1 nodes failed, 0 spares: n2 (failed); requeueing with n[2,7] excluded"
    # a requeue that would leave the site too few nodes would pend forever: the job ends instead
    stuck = _pick(verdicts, ["n1", "n2"], 2, 0, restarts_left=1, exclude=["n7"], site_nodes=3)
    assert stuck.outcome == "end"
    assert "; not requeued: without them 1 of the site's 3 nodes remain for 2" in stuck.reason
    assert _pick(verdicts, ["n1", "n2"], 2, 0, restarts_left=1, exclude=["n7"], site_nodes=4).outcome == "requeue"
    ended = _pick(verdicts, ["n1", "n2"], 2, 0, restarts_left=0)
    assert ended.outcome == "end" and ended.reason.endswith("; resubmit with --exclude n2")


@pytest.mark.parametrize(("text", "says"), [
    ("not json", "is not JSON"),
    ('{"groups": []}', "has no list of nodes"),
    ('{"nodes": [{"host": "n1;reboot", "status": "ok"}]}', "is not a valid host name"),
    ('{"nodes": [{"host": "n1", "status": "fine"}]}', "verdict 'fine' is not one of"),
    ('{"nodes": ["n1"]}', "nodes[0]: not an object"),
])
def test_a_report_that_is_not_a_preflight_report_is_refused(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(ch.ChooseError, match=None) as err:
        ch.read_report(path)
    assert says in str(err.value)


def test_a_report_over_the_budget_or_not_a_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ch, "REPORT_MAX_BYTES", 64)
    big = _write(tmp_path, [_ok(f"n{i}") for i in range(10)])
    with pytest.raises(ch.ChooseError, match="larger than 64 bytes"):
        ch.read_report(big)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ch.ChooseError, match="cannot read the preflight report"):
        ch.read_report(fifo)


def test_node_text_is_made_printable_and_bounded(tmp_path: Path) -> None:
    report = _write(tmp_path, [{"host": "n1", "status": "failed", "error": "\x1b[31mred\x1b[0m\nnext " + "x" * 900,
                                "figures": {"gemm_tflops": float("inf"), "Bad Name": 1, "busbw_inter_gbps": 3}}])
    [v] = ch.read_report(report).values()
    assert "\x1b" not in v.reason and "\n" not in v.reason and len(v.reason) == ch.REASON_MAX
    assert v.figures == {"busbw_inter_gbps": 3.0}


def test_selections_round_trip_and_dropped_nodes_cover_every_restart(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    first = _pick({"n1": ch.NodeVerdict("n1", "failed", "bad gpu"), "n2": ch.NodeVerdict("n2", "ok")}, ["n1", "n2"],
                  2, 0, restarts_left=1)
    ch.write_selection(first, ch.selection_path(tmp_path, "77", 0))
    verdicts = {"n2": ch.NodeVerdict("n2", "ok"), "n3": ch.NodeVerdict("n3", "slow", "gemm", {"gemm_tflops": 2})}
    second = ch.choose(verdicts, ["n2", "n3", "n4"], wanted=1, spares=2, job_id="77", restart=1)
    ch.write_selection(second, ch.selection_path(tmp_path, "77", 1))
    (tmp_path / "logs" / "nodes-77.r2.json").write_text('{"version": 1, "outcome": "launch"}')   # invalid: skipped
    assert ch.selections(tmp_path, "77") == [first, second]
    assert [(v.host, v.verdict) for v in ch.dropped_nodes(tmp_path, "77")] == [
        ("n1", "failed"), ("n3", "slow"), ("n4", "unchecked")]
    assert ch.selections(tmp_path, "78") == []
    with pytest.raises(ch.ChooseError, match="is not a Slurm job id"):
        ch.selections(tmp_path, "../77")


def test_a_selection_symlinked_elsewhere_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    sel = _pick({"n1": ch.NodeVerdict("n1", "failed")}, ["n1", "n2"], 1, 1)
    outside = tmp_path / "outside.json"
    ch.write_selection(sel, outside)
    (tmp_path / "logs" / "nodes-77.r0.json").symlink_to(outside)
    assert ch.selections(tmp_path, "77") == []


def test_a_check_that_failed_on_every_node_alike_drops_none_and_never_requeues(tmp_path: Path) -> None:
    why = "task 0: ModuleNotFoundError: No module named 'torch'"
    report = _write(tmp_path, [{"host": h, "status": "unjudged", "reason": why, "checks": []} for h in ("n1", "n2")])
    sel = _pick(ch.read_report(report), ["n1", "n2"], 2, 0, restarts_left=3)
    assert sel.outcome == "launch" and sel.chosen == ("n1", "n2") and sel.dropped == () and sel.exclude == ()
    assert f"preflight judged no node: it failed on every node alike ({why})" in sel.reason
