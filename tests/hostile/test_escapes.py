"""Terminal escape sequences in text from outside (a job's logs, a record, a node's Reason in
Slurm) never reach the terminal: the human output drops them (tooltext.printable, the one
helper), ``--json`` keeps the text as escaped data.  Each case runs the real CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clusterkit.tooltext import printable, printable_lines
from tests.conftest import REPO

# erase the line and print "ALL OK" over it, retitle the terminal, ring the bell, clear the screen
ATTACK = "\x1b]0;pwned\x07\x1b[2K\x1b[1GALL OK\x1b[2J\x9b31m\u2028\x08\r"
RAW = ("\x1b", "\x07", "\x08", "\x9b", "\u2028", "\r")
DATA = REPO / "tests" / "data" / "sites" / "slurm-22.05"


def _clean(text: str) -> None:
    for raw in RAW:
        assert raw not in text, (raw, text)


@pytest.mark.parametrize("text", [ATTACK, "\x1bP1;2|x\x1b\\", "\x1b[?1049h", "\x1b]8;;http://x\x07link\x1b]8;;\x07",
                                  "a\x00b", "\x85next", "\x7f", "tab\there"])
def test_printable_drops_every_escape_and_control(text: str) -> None:
    one, lines = printable(text), printable_lines(text + "\n" + text)
    _clean(one)
    _clean(lines)
    assert "\n" not in one and lines.count("\n") >= 1
    assert "\x1b" not in one and all(ord(c) >= 0x20 and not 0x7f <= ord(c) <= 0x9f for c in one)


def test_printable_keeps_the_words() -> None:
    assert printable("CUDA out of memory " + ATTACK).startswith("CUDA out of memory ALL OK")
    assert printable_lines("a\tb\nc") == "a\tb\nc"


def test_doctor_evidence_is_printed_without_escapes(ck, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "train.out").write_text(f"rank 0 step 1\ntorch.OutOfMemoryError: CUDA out of memory. {ATTACK}\n")
    res = ck.proc("doctor", "--logs", str(logs))
    assert "gpu-oom" in res.out, res
    _clean(res.out)
    _clean(res.err)
    assert f"{logs / 'train.out'}:2: torch.OutOfMemoryError: CUDA out of memory. ALL OK" in res.out
    as_json = ck.proc("doctor", "--logs", str(logs), "--json")
    assert "\x1b" not in as_json.out and "\\u001b]0;pwned" in as_json.out


def _record(root: Path, run_dir: Path, **kw: object) -> None:
    root.mkdir(parents=True)
    run_dir.mkdir()
    data = dict(version=1, job_id="7", scheduler="local", site="local", site_source="x.yaml",
                stage="single-node", launcher="torchrun", job_name="ck", nnodes=1, world_size=1,
                command=["python", "train.py"], run_dir=str(run_dir), script="job.sbatch",
                submitted_at="2026-01-01T00:00:00.000000Z", host="login1", plan={}, **kw)
    (root / "20260101T000000000000-local-7.json").write_text(json.dumps(data))


def test_status_prints_a_cached_reason_and_diagnosis_without_escapes(ck, tmp_path: Path) -> None:
    env = {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")}
    _record(tmp_path / "state" / "jobs", tmp_path / "run", state="FAILED", exit_code=1,
            reason=f"exit 1 {ATTACK}", diagnosis=f"gpu-oom: CUDA out of memory {ATTACK}")
    one = ck.proc("status", "7", env=env)
    assert one.code == 0, one
    _clean(one.out)
    _clean(one.err)
    assert "doctor: gpu-oom: CUDA out of memory ALL OK" in one.out
    table = ck.proc("status", "--all", env=env)
    assert table.code == 0 and "FAILED" in table.out, table
    _clean(table.out)
    as_json = ck.proc("status", "7", "--json", env=env)
    assert "\\u001b]0;pwned" in as_json.out and "\x1b" not in as_json.out


def test_drift_prints_a_node_reason_without_escapes(ck, tmp_path: Path) -> None:
    # the captured down/drain listing (Slurm 22.05.8), node3's Reason rewritten as a hostile
    # admin or a compromised health check could set it (scontrol update ... Reason=...)
    nodes = (DATA / "show-node-o-down-drain.txt").read_text().replace("Reason=bad gpu", f"Reason=bad gpu {ATTACK}")
    assert ATTACK in nodes
    (tmp_path / "node.txt").write_text(nodes)
    site = tmp_path / "tb.yaml"
    site.write_text((REPO / "site_configs" / "testbed.yaml").read_text())
    # the scontrol stand-in prints the captures, the node listing from node.txt
    res = ck.proc("sites", "drift", str(site), env={
        "PATH": f"{REPO / 'tests' / 'hostile' / 'standin'}{os.pathsep}{os.environ['PATH']}",
        "CK_STANDIN_DATA": str(DATA), "CK_STANDIN_NODES": str(tmp_path / "node.txt")})
    assert "node3: IDLE+DRAIN (bad gpu" in res.out, res  # the words before the attack stay
    _clean(res.out)
    _clean(res.err)


def test_a_perf_tasks_error_and_backend_reach_the_report_printable() -> None:
    from clusterkit.preflight.perf import judge, parse_output
    from tests.preflight.test_perf import HOSTS, LIMITS, _capture, _rewrite

    marker, lines = _capture("healthy")
    lines = _rewrite(lines, marker, lambda ev: ev["ev"] == "init", lambda ev: {**ev, "backend": f"gloo{ATTACK}"})
    lines = _rewrite(lines, marker, lambda ev: ev["rank"] == 2 and ev["ev"] == "done", lambda ev: None)
    lines.append(f"2: {marker} " + json.dumps({"ev": "error", "rank": 2, "host": "node3", "error": f"boom {ATTACK}"}))
    report = judge(HOSTS, parse_output(lines, marker, HOSTS), LIMITS)
    _clean(report.backend or "")
    node3 = next(n for n in report.nodes if n.host == "node3")
    assert node3.status == "failed" and "boom ALL OK" in node3.reason
    _clean(node3.reason)
    _clean(json.dumps(report.to_dict(), ensure_ascii=False))


def test_a_log_files_name_is_printed_without_escapes(ck, tmp_path: Path) -> None:
    env = {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")}
    _record(tmp_path / "state" / "jobs", tmp_path / "run", state="FAILED", exit_code=1)
    (tmp_path / "run" / "logs").mkdir()
    name = "7.r0.\x1b]0;pwned\x07\x1b[2Jrank0.out"
    (tmp_path / "run" / "logs" / name).write_text("hello\n")
    res = ck.proc("logs", "7", env=env)
    assert res.code == 0 and "hello" in res.out, res
    assert "==> " in res.out
    _clean(res.out)
    _clean(res.err)


def test_a_long_reason_in_a_record_is_printed_bounded(ck, tmp_path: Path) -> None:
    env = {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")}
    _record(tmp_path / "state" / "jobs", tmp_path / "run", state="FAILED", exit_code=1,
            reason="node failure " + "x" * 900_000 + ATTACK)   # within a record's 1 MiB
    res = ck.proc("status", "7", env=env)
    assert res.code == 0 and "reason: node failure xxx" in res.out, res
    assert len(res.out) < 4000 and "more chars" in res.out
    _clean(res.out)


def test_a_four_megabyte_slurm_reason_is_bounded(tmp_path: Path) -> None:
    """A job's reason file (the job script writes it) or Slurm's Reason= of 4 MB: one bounded line."""
    from clusterkit.scheduler.base import REASON_MAX, JobStatus
    from clusterkit.scheduler.slurm import SlurmScheduler
    from clusterkit.vocab import JobState
    from tests.scheduler.test_slurm_status import _Answers, _rec

    huge = "bad node " + "x" * (4 << 20) + ATTACK
    st = JobStatus(state=JobState.FAILED, reason=huge, source="squeue")
    assert st.reason is not None and len(st.reason) < REASON_MAX + 40 and st.reason.startswith("bad node xxx")
    (tmp_path / "31.result").write_text("1\n")
    (tmp_path / "31.reason").write_text(huge)
    [got] = SlurmScheduler(_Answers({"31": JobStatus(state=JobState.FAILED, exit_code=1, source="sacct")})).status(
        [_rec(tmp_path, "31")])
    assert got.reason is not None and len(got.reason) < REASON_MAX + 40
    _clean(got.reason)


def test_a_long_reason_is_cut_between_words() -> None:
    """Slurm's reason and a node's preflight reason are bounded, cut at a space (never mid-word)
    with what was left out said."""
    from clusterkit.preflight.choose import REASON_MAX as NODE_MAX
    from clusterkit.scheduler.base import REASON_MAX, JobStatus
    from clusterkit.tooltext import shorten

    words = " ".join(f"word{i:04d}" for i in range(300))   # 2,699 characters, words of 8
    st = JobStatus(state="FAILED", reason=words)
    kept, _, rest = st.reason.partition("... [")
    assert len(kept) <= REASON_MAX and words.startswith(kept) and words[len(kept)] == " "
    assert rest == f"{len(words) - len(kept)} more chars]"
    cut = shorten(words, NODE_MAX)
    assert len(cut) <= NODE_MAX and cut.endswith("...") and words[len(cut) - 3] == " "
    assert shorten("x" * 50, 20) == "x" * 17 + "..."      # one long word: cut inside it
    assert shorten("fits", 20) == "fits"
