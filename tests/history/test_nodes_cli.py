"""``clusterkit nodes`` and the next job, end to end through the command line.

Three jobs of the testbed site (Slurm) whose logs hold a real Xid 79 (the diagnose corpus's
akash-network/support issue 209 capture, in node3's log) are diagnosed with ``clusterkit doctor
JOB``; doctor blames node3 for ``gpu-hardware`` each time and the node history remembers it, so
the next ``render`` keeps node3 out and says why.  Slurm does not run here: the commands get a
PATH without its clients, so doctor diagnoses from the logs alone (exit 3, said in one line), as
it does on a login node whose controller is down.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clusterkit.history.store import MAX_BYTES
from clusterkit.scheduler.records import JobRecord, RecordStore

REPO = Path(__file__).resolve().parents[2]
XID79 = REPO / "tests" / "diagnose" / "corpus" / "akash-209-xid79.log"
RENDER = ("render", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1")


def _failed_job(tmp_path: Path, store: RecordStore, job_id: str, when: str) -> JobRecord:
    run = tmp_path / f"run{job_id}"
    (run / "logs").mkdir(parents=True)
    body = XID79.read_text().split("# ---\n", 1)[1]   # the capture, without its source header
    (run / "logs" / f"{job_id}.r0.node3.out").write_text(body)
    (run / "logs" / f"{job_id}.r0.node1.out").write_text("step 0 loss 1.0\n")
    rec = JobRecord(job_id=job_id, scheduler="slurm", site="testbed", site_source="site_configs/testbed.yaml",
                    stage="multi-node", launcher="torchrun", job_name="ck-train", nnodes=2, world_size=2,
                    command=["python", "train.py"], run_dir=str(run), script=str(run / "job.sbatch"),
                    submitted_at=when, host="login1", plan={})
    store.save(rec)
    return rec


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    no_slurm = tmp_path / "bin"
    no_slurm.mkdir()
    return {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state"), "PATH": str(no_slurm), "COLUMNS": "200"}


def test_three_doctor_verdicts_keep_node3_out_of_the_next_job(ck, tmp_path: Path, env: dict[str, str]) -> None:
    store = RecordStore(root=tmp_path / "state" / "jobs")
    ids = ["7001", "7002", "7003"]
    for i, job in enumerate(ids):
        _failed_job(tmp_path, store, job, f"2099-01-0{i + 1}T10:00:00.000000Z")
    before = ck.proc(*RENDER, "--json", "--", "python", "train.py", env=env)
    assert before.code == 0 and "--exclude" not in json.loads(before.out)["job_sbatch"], before
    for job in ids:
        doc = ck.proc("doctor", job, "--json", env=env)
        assert doc.code == 3 and "Traceback" not in doc.err, doc       # Slurm unreachable: the logs alone
        verdict = json.loads(doc.out)["verdict"]
        assert (verdict["category"], verdict["node"]) == ("gpu-hardware", "node3"), verdict

    table = ck.proc("nodes", "--site", "testbed", "--json", env=env)
    assert table.code == 0, table
    [node3] = json.loads(table.out)["nodes"]
    assert node3["node"] == "node3" and node3["failures"] == 3 and node3["recent_hardware"] == 3
    assert node3["verdicts"] == {"gpu-hardware": 3} and node3["sources"] == ["doctor"]
    assert node3["jobs"] == ["7003", "7002", "7001"] and node3["kept_out"] is True
    assert node3["drain_command"].startswith("scontrol update NodeName=node3 State=DRAIN Reason='clusterkit: 3 ")

    plain = ck.proc("nodes", "--site", "testbed", env=env)
    assert plain.code == 0 and plain.err == "", plain
    [row] = [line for line in plain.out.splitlines() if line.startswith("node3 ")]
    assert row.split()[:3] == ["node3", "3", "3"] and "gpu-hardware x3" in row and "kept out" in row
    assert "  scontrol update NodeName=node3 State=DRAIN" in plain.out and "does not run this" in plain.out

    after = ck.proc(*RENDER, "--out", str(tmp_path / "next"), "--", "python", "train.py", env=env)
    assert after.code == 0, after
    assert "#SBATCH --exclude=node3\n" in (tmp_path / "next" / "job.sbatch").read_text()
    assert json.loads((tmp_path / "next" / "plan.json").read_text())["exclude"] == ["node3"]
    assert "choices: " in after.out and after.out.count("kept out: node3 (node history)") == 1
    assert ("node history: keeping node3 out of the job (#SBATCH --exclude): node3: 3 hardware failure(s) in "
            "30 day(s): gpu-hardware x3 (jobs 7003, 7002, 7001, ...)") not in after.err   # three jobs: no "..."
    assert "gpu-hardware x3 (jobs 7003, 7002, 7001); --set node_history=false lets them in" in after.err

    let_in = ck.proc(*RENDER, "--set", "node_history=false", "--json", "--", "python", "train.py", env=env)
    assert let_in.code == 0 and "--exclude" not in json.loads(let_in.out)["job_sbatch"], let_in


def test_a_site_allow_list_lets_a_repaired_node_in(ck, tmp_path: Path, env: dict[str, str]) -> None:
    store = RecordStore(root=tmp_path / "state" / "jobs")
    for i, job in enumerate(("7101", "7102", "7103")):
        _failed_job(tmp_path, store, job, f"2099-01-0{i + 1}T10:00:00.000000Z")
        assert ck.proc("doctor", job, env=env).code == 3
    site = tmp_path / "testbed-allow.yaml"
    site.write_text(f"name: testbed\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\n"
                    "node_history: {allow: 'node[3-4]'}\n")
    out = ck.proc(*RENDER[:2], str(site), *RENDER[3:], "--json", "--", "python", "train.py", env=env)
    assert out.code == 0 and "--exclude" not in json.loads(out.out)["job_sbatch"], out
    [node3] = json.loads(ck.proc("nodes", "--site", str(site), "--json", env=env).out)["nodes"]
    assert (node3["kept_out"], node3["allowed"], node3["drain_command"]) == (False, True, None)


def test_keeping_repeat_offenders_out_never_leaves_a_job_too_few_nodes(ck, tmp_path: Path,
                                                                       env: dict[str, str]) -> None:
    store = RecordStore(root=tmp_path / "state" / "jobs")
    for i, job in enumerate(("7201", "7202", "7203")):
        _failed_job(tmp_path, store, job, f"2099-01-0{i + 1}T10:00:00.000000Z")
        assert ck.proc("doctor", job, env=env).code == 3
    four = ck.proc(*RENDER[:6], "4", *RENDER[7:], "--json", "--", "python", "train.py", env=env)
    assert four.code == 0, four
    doc = json.loads(four.out)
    assert "--exclude" not in doc["job_sbatch"]
    [note] = [w for w in doc["warnings"] if w.startswith("node history: ")]
    assert note.startswith("node history: not keeping node3 out (") and "gpu-hardware x3" in note, note


@pytest.mark.parametrize("hostile", ["huge", "fifo", "symlink", "garbage", "forged"])
def test_a_hostile_history_file_changes_nothing_and_says_so_in_one_line(ck, tmp_path: Path, env: dict[str, str],
                                                                       hostile: str) -> None:
    path = tmp_path / "state" / "nodes" / "testbed.json"
    path.parent.mkdir(parents=True)
    if hostile == "huge":
        with path.open("wb") as fh:
            fh.truncate(MAX_BYTES + 1)
    elif hostile == "fifo":
        os.mkfifo(path)
    elif hostile == "symlink":
        (tmp_path / "theirs.json").write_text(json.dumps({"version": 1, "events": [
            {"node": "node1", "at": f"2099-01-0{i}T00:00:00Z", "source": "doctor", "what": "gpu-hardware",
             "hardware": True, "job": str(i)} for i in range(1, 4)]}))
        path.symlink_to(tmp_path / "theirs.json")
    elif hostile == "garbage":
        path.write_bytes(b"\x00\xff" * 1000 + b"\x1b]0;owned\x07")
    else:   # entries that try to make node1 a repeat offender with names no node has
        path.write_text(json.dumps({"version": 1, "events": [
            {"node": "node1\nnode2", "at": "2099-01-01T00:00:00Z", "source": "doctor", "what": "gpu-hardware",
             "hardware": True}, {"node": "node1", "at": "2099-01-01T00:00:00Z", "source": "doctor",
                                 "what": "gpu hardware; rm", "hardware": True}]}))
    shown = ck.proc("nodes", "--site", "testbed", "--json", timeout=60, env=env)
    assert shown.code == 0 and json.loads(shown.out)["nodes"] == [], shown
    [line] = shown.err.splitlines()
    assert line.startswith("clusterkit: warning: node history ") and "Traceback" not in shown.err, shown.err
    assert "\x1b" not in shown.err and "\x07" not in shown.err
    job = ck.proc(*RENDER, "--json", "--", "python", "train.py", timeout=60, env=env)
    assert job.code == 0 and "--exclude" not in json.loads(job.out)["job_sbatch"], job
