"""The in-job node choice writes and reads files in the run directory's ``logs/``, which others may
reach: a planted temp file or symlink is never written through, and a forged, inconsistent or
out-of-directory selection never feeds ``status``/``doctor``, ``--exclude-from`` or the next
restart's choice.  Each case runs the real ``choose-nodes`` (or the reader) on the files an
attacker would leave."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clusterkit.preflight import choose as ch


def _report(run: Path, job: str, restart: int, hosts: dict[str, str]) -> None:
    (run / "logs").mkdir(parents=True, exist_ok=True)
    nodes = [{"host": h, "status": s, "checks": []} for h, s in hosts.items()]
    ch.report_path(run, job, restart).write_text(json.dumps({"version": 1, "nodes": nodes}))


def _choose(ck, run: Path, job: str, restart: int, alloc: str, nodes: int, *extra: str):  # type: ignore[no-untyped-def]
    return ck("choose-nodes", "--run-dir", str(run), "--job", job, "--restart", str(restart),
              "--allocation", alloc, "--nodes", str(nodes), *extra)


def _forged(job: str = "42", restart: int = 0, **kw: object) -> dict[str, object]:
    data: dict[str, object] = dict(version=1, job_id=job, restart=restart, check="base", allocation=["n1", "n2"],
                                   wanted=2, spares=0, outcome="requeue", chosen=[],
                                   dropped=[{"host": "n1", "verdict": "failed", "reason": "x"}], unused=[],
                                   reason="r", exclude=["n1"])
    data.update(kw)
    return data


def test_a_planted_temp_symlink_is_not_written_through(ck, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _report(run, "42", 0, {"n1": "ok", "n2": "ok"})
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    (run / "logs" / "nodes-42.r0.json.tmp").symlink_to(victim)
    result = _choose(ck, run, "42", 0, "n[1-2]", 2)
    assert result.code == 0, result
    assert victim.read_text() == "the user's own file\n"
    assert ch.selections(run, "42")[0].chosen == ("n1", "n2")
    assert [p.name for p in (run / "logs").iterdir() if ".tmp" in p.name] == ["nodes-42.r0.json.tmp"]


def test_a_selection_symlink_is_replaced_not_followed(ck, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _report(run, "42", 0, {"n1": "ok"})
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    ch.selection_path(run, "42", 0).symlink_to(victim)
    assert _choose(ck, run, "42", 0, "n1", 1).code == 0
    assert victim.read_text() == "keep\n" and not ch.selection_path(run, "42", 0).is_symlink()


def test_a_logs_directory_that_is_a_symlink_is_neither_read_nor_written(ck, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    _report(elsewhere, "42", 0, {"n1": "ok"})
    (elsewhere / "logs" / "nodes-42.r0.json").write_text(json.dumps(_forged()))
    run = tmp_path / "run"
    run.mkdir()
    (run / "logs").symlink_to(elsewhere / "logs")
    assert ch.selections(run, "42") == []
    assert ch.dropped_nodes(run, "42") == []
    with pytest.raises(OSError):
        ch.write_selection(ch.selections(elsewhere, "42")[0], ch.selection_path(run, "42", 1))


def test_a_forged_earlier_exclusion_list_does_not_end_the_next_restart(ck, tmp_path: Path) -> None:
    """The round-two attack: restart 0's file excludes 200 nodes, so restart 1 ended at
    "-184 nodes remain"; only the nodes an earlier restart dropped from its own allocation count."""
    run = tmp_path / "run"
    _report(run, "42", 1, {"n3": "ok", "n4": "failed"})
    forged = _forged(exclude=[f"x{i}" for i in range(200)] + ["n1"])
    ch.selection_path(run, "42", 0).write_text(json.dumps(forged))
    result = _choose(ck, run, "42", 1, "n[3-4]", 2, "--site-nodes", "16", "--restarts-left", "2")
    assert result.code == 4, result       # requeued without n1 (dropped at restart 0) and n4
    assert result.out.splitlines()[0] == "n[1,4]"
    assert "remain" not in result.out


@pytest.mark.parametrize("change", [
    {"dropped": [{"host": "victim9", "verdict": "failed", "reason": "forged"}], "exclude": ["victim9"]},
    {"chosen": ["n1", "n2", "n1"], "outcome": "launch", "dropped": [], "exclude": []},
    {"wanted": 500},
    {"allocation": ["n1", "n1"]},
    {"job_id": "43"},
    {"restart": 3},
    {"unused": ["n1"]},
    {"dropped": [{"host": "n1", "verdict": "failed"}], "exclude": []},
])
def test_an_inconsistent_selection_is_not_read(tmp_path: Path, change: dict[str, object]) -> None:
    (tmp_path / "logs").mkdir()
    ch.selection_path(tmp_path, "42", 0).write_text(json.dumps(_forged(**change)))
    assert ch.selections(tmp_path, "42") == []
    assert ch.dropped_nodes(tmp_path, "42") == []


def test_a_selection_of_another_allocation_size_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    ch.selection_path(tmp_path, "42", 0).write_text(json.dumps(_forged()))
    assert [v.host for v in ch.dropped_nodes(tmp_path, "42")] == ["n1"]     # consistent: read
    assert ch.dropped_nodes(tmp_path, "42", allocated=8) == []


@pytest.mark.parametrize("text", ['{"version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
                                  '{"version": 1, "restart": ' + "9" * 5000 + "}"], ids=["deep", "huge-int"])
def test_deep_or_huge_number_json_is_no_selection_and_no_traceback(ck, tmp_path: Path, text: str) -> None:
    (tmp_path / "logs").mkdir()
    ch.selection_path(tmp_path, "42", 0).write_text(text)
    assert ch.selections(tmp_path, "42") == []
    ch.report_path(tmp_path, "42", 1).write_text(text.replace('"version": 1', '"nodes": []'))
    result = _choose(ck, tmp_path, "42", 1, "n1", 1)
    assert result.code == 2 and "Traceback" not in result.err, result
    assert result.err.count("\n") == 1


def test_write_atomic_never_writes_through_a_planted_name(tmp_path: Path) -> None:
    from clusterkit.safefile import write_atomic

    target = tmp_path / "f.json"
    write_atomic(target, b"1")
    assert target.read_bytes() == b"1" and sorted(os.listdir(tmp_path)) == ["f.json"]
