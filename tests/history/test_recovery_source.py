"""The ``recovery`` source of the node history: the nodes the supervisor's recovery inside the
allocation dropped, read from ``logs/attempts-<job>.r<restart>.json`` as the supervisor writes it
(:func:`clusterkit.supervise.recovery.record`, after :func:`clusterkit.supervise.replan.next_step`),
and what is skipped, with a note, when such a file is not one."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from clusterkit.config.history_keys import NodeHistoryKeys
from clusterkit.history import book, sources
from clusterkit.history.store import Event, history_path
from clusterkit.history.summary import summarize
from clusterkit.scheduler.records import JobRecord
from clusterkit.supervise import attempts, recovery, replan
from clusterkit.supervise.replan import Attempted, Verdict

NOW = datetime(2099, 1, 10, tzinfo=timezone.utc)
WHEN = "2099-01-02T10:00:00.000000Z"
NODES = ("node1", "node2")


def job(tmp_path: Path, job_id: str = "8001", **plan: object) -> JobRecord:
    run = tmp_path / f"run{job_id}"
    (run / "logs").mkdir(parents=True, exist_ok=True)
    return JobRecord(job_id=job_id, scheduler="slurm", site="testbed", site_source="site_configs/testbed.yaml",
                     stage="multi-node", launcher="torchrun", job_name="ck-train", nnodes=2, world_size=2,
                     command=["python", "train.py"], run_dir=str(run), script=str(run / "job.sbatch"),
                     submitted_at=WHEN, host="login1", plan={"spares": 2, "max_restarts": 2, **plan})


def supervised(rec: JobRecord, verdict: Verdict, down: list[str], *, restart: int = 0,
               status: int = 1) -> recovery.Run:
    """One failed attempt judged and recorded as the supervisor does it."""
    run = recovery.Run(job_id=rec.job_id, run_dir=rec.run_dir, restart=restart,
                       allocation=(*NODES, "node3", "node4"), nodes=NODES, unused=("node3", "node4"),
                       max_relaunches=3)
    step = replan.next_step(verdict, down, Attempted(0, NODES, run.unused, 3, restarts_left=2))
    recovery.record(run, status, verdict, step)
    return run


XID = Verdict("gpu-hardware", "Xid 79 on node2: GPU has fallen off the bus", "node2")


def test_each_node_a_recovery_dropped_is_an_event_of_the_job(tmp_path: Path) -> None:
    rec = job(tmp_path)
    supervised(rec, XID, ["node1"])
    got, notes = sources.from_record(rec)
    assert notes == []
    assert [(e.node, e.source, e.what, e.hardware, e.job, e.at) for e in got] == [
        ("node2", "recovery", "gpu-hardware", True, "8001", WHEN),
        ("node1", "recovery", "slurm-node-failure", True, "8001", WHEN)]
    assert got[0].detail.startswith("attempt 0: doctor: gpu-hardware: Xid 79 on node2")
    assert got[1].detail == "attempt 0: Slurm reports it down or failing"


def test_a_network_verdict_is_a_failure_but_not_hardware(tmp_path: Path) -> None:
    rec = job(tmp_path)
    supervised(rec, Verdict("nccl-network", "NET/IB : Got completion with error 12", "node1"), [])
    [e], _ = sources.from_record(rec)
    assert (e.node, e.what, e.hardware) == ("node1", "nccl-network", False)


def test_a_verdict_that_drops_no_node_and_a_local_job_give_nothing(tmp_path: Path) -> None:
    rec = job(tmp_path)
    supervised(rec, Verdict("user-code", "KeyError: 'lr'", "node1"), [])
    assert attempts.read(rec.run_dir, rec.job_id) != []          # the attempt is recorded, nothing dropped
    assert sources.from_record(rec) == ([], [])
    local = job(tmp_path, "8002").model_copy(update={"scheduler": "local"})
    supervised(local, XID, [])
    assert sources.from_record(local) == ([], [])


def test_three_recoveries_keep_the_node_out_and_doctor_on_the_same_job_is_not_counted_twice(tmp_path: Path) -> None:
    events: list[Event] = []
    for job_id in ("8101", "8102", "8103"):
        rec = job(tmp_path, job_id)
        supervised(rec, XID, [])
        events += sources.from_record(rec)[0]
    doctor = sources.from_diagnosis(job(tmp_path, "8103"), {"verdict": {
        "node": "node2", "category": "gpu-hardware", "summary": XID.summary}}, at=WHEN)
    [node2] = summarize([*events, *doctor], NodeHistoryKeys(), NOW)
    assert (node2.node, node2.failures, node2.recent_hardware, node2.kept_out) == ("node2", 3, 3, True)
    assert node2.sources == ("recovery",) and node2.jobs == ("8103", "8102", "8101")
    [twice] = summarize([*events[:2], *doctor], NodeHistoryKeys(), NOW)   # a different job: two failures
    assert (twice.recent_hardware, twice.kept_out, twice.sources) == (3, True, ("doctor", "recovery"))


def test_refresh_records_them_in_the_history_once(tmp_path: Path) -> None:
    from clusterkit.scheduler.records import RecordStore

    store = RecordStore(root=tmp_path / "jobs")
    rec = job(tmp_path)
    store.save(rec)
    supervised(rec, XID, [])
    root = tmp_path / "nodes"
    assert book.refresh("testbed", store, root) == []
    assert book.refresh("testbed", store, root) == []
    doc = json.loads(history_path("testbed", root).read_text())
    assert [(e["node"], e["source"], e["what"]) for e in doc["events"]] == [("node2", "recovery", "gpu-hardware")]


def _forge(rec: JobRecord, restart: int, change: dict[str, object] | None = None,
           attempt: dict[str, object] | None = None) -> Path:
    """The supervisor's record of ``restart`` rewritten with ``change`` (top level) and ``attempt``
    (its first attempt's fields)."""
    real = attempts.path_for(rec.run_dir, rec.job_id, 0)
    doc = json.loads(real.read_text())
    doc = {**doc, "restart": restart, **(change or {})}
    if attempt is not None:
        doc["attempts"] = [{**doc["attempts"][0], **attempt}]
    path = attempts.path_for(rec.run_dir, rec.job_id, restart)
    path.write_text(json.dumps(doc))
    return path


def test_a_malformed_record_is_skipped_with_a_note_and_the_good_one_kept(tmp_path: Path) -> None:
    rec = job(tmp_path, max_restarts=9)
    supervised(rec, XID, [])
    _forge(rec, 1, attempt={"dropped": [{"host": "../../etc/passwd", "why": "attempt 0: doctor: gpu-hardware"}]})
    _forge(rec, 2, {"job_id": "9999"})                                     # another job's record
    _forge(rec, 3, attempt={"dropped": [{"host": "node3", "why": "because I said so\x1b]0;x\x07"}]})
    _forge(rec, 4, attempt={"nodes": [f"node{i}" for i in range(1, 10)]})  # more nodes than the allocation
    (Path(rec.run_dir) / "logs" / "attempts-8001.r5.json").write_bytes(b"\xff" * (attempts.MAX_BYTES + 1))
    os.mkfifo(Path(rec.run_dir) / "logs" / "attempts-8001.r6.json")
    (Path(rec.run_dir) / "logs" / "attempts-8001.r7.json").symlink_to(attempts.path_for(rec.run_dir, "8001", 0))
    _forge(rec, 8, attempt={"then": "rm -rf"})
    events, notes = sources.from_record(rec)
    assert [(e.node, e.what) for e in events] == [("node2", "gpu-hardware")]   # restart 0's, the real one
    assert len(notes) == 8, notes
    assert all(n.startswith("node history: job 8001: attempts-8001.r") and n.endswith("; skipped") for n in notes)
    by = {n.split(".r", 1)[1][0]: n for n in notes}
    assert "not a valid host name" in by["1"] and "not a record of attempts of job 8001" in by["2"]
    assert "for a reason clusterkit does not write" in by["3"] and "\x1b" not in by["3"] and "\x07" not in by["3"]
    assert "names 9 nodes, the job's allocation holds 4" in by["4"] and "larger than 1 MiB" in by["5"]
    assert "not a regular file: a FIFO" in by["6"]
    assert "link" in by["7"] and "'then' is not relaunch, requeue or stop" in by["8"]


def test_a_restart_beyond_the_jobs_budget_is_skipped(tmp_path: Path) -> None:
    rec = job(tmp_path, max_restarts=1)
    supervised(rec, XID, [])
    _forge(rec, 2, attempt={"dropped": [{"host": "node1", "why": "attempt 0: doctor: gpu-hardware"}]})
    events, [note] = sources.from_record(rec)
    assert [e.node for e in events] == ["node2"]
    assert note == "node history: job 8001: attempts-8001.r2.json: restart 2 is beyond the job's 1 restart(s); skipped"


def test_the_file_named_is_the_records_own_never_one_the_content_names(tmp_path: Path) -> None:
    rec = job(tmp_path)
    other = job(tmp_path, "8002")
    supervised(other, XID, [])                       # another job's attempts, in another run directory
    doc = json.loads(attempts.path_for(other.run_dir, "8002", 0).read_text())
    doc["run_dir"] = other.run_dir                   # a field the reader never follows
    attempts.path_for(rec.run_dir, "8001", 0).write_text(json.dumps({**doc, "job_id": "8001"}))
    events, notes = sources.from_record(rec)
    assert [(e.node, e.job) for e in events] == [("node2", "8001")] and notes == []
    bad_id = rec.model_copy(update={"job_id": "8001/../8002"})
    assert sources.from_record(bad_id) == ([], [])
