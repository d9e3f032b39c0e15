"""``clusterkit nodes`` and the next job with the supervisor's recovery as the source.

Three jobs of the testbed site each lost node3 inside their allocation: the attempt's logs hold
a real Xid 79 (the diagnose corpus's akash-network/support issue 209 capture, in node3's log),
``clusterkit doctor --logs --json`` judged them as the supervisor asks it to, and the supervisor's
own code (:func:`clusterkit.supervise.replan.next_step`, :func:`clusterkit.supervise.recovery.record`)
dropped node3 and wrote ``logs/attempts-<job>.r0.json``.  ``clusterkit nodes`` counts them and the
next ``render`` keeps node3 out; a fourth job's forged record is skipped with one warning line.
Slurm does not run here: nothing of these commands asks it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterkit.scheduler.records import JobRecord, RecordStore
from clusterkit.supervise import attempts, recovery, replan
from tests.conftest import CLI

REPO = Path(__file__).resolve().parents[2]
XID79 = REPO / "tests" / "diagnose" / "corpus" / "akash-209-xid79.log"
RENDER = ("render", "--site", "testbed", "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1")


def _recovered_job(ck: CLI, tmp_path: Path, store: RecordStore, job_id: str, when: str) -> JobRecord:
    run = tmp_path / f"run{job_id}"
    (run / "logs").mkdir(parents=True)
    body = XID79.read_text().split("# ---\n", 1)[1]   # the capture, without its source header
    (run / "logs" / f"{job_id}.r0.node3.out").write_text(body)
    (run / "logs" / f"{job_id}.r0.node1.out").write_text("step 0 loss 1.0\n")
    rec = JobRecord(job_id=job_id, scheduler="slurm", site="testbed", site_source="site_configs/testbed.yaml",
                    stage="multi-node", launcher="torchrun", job_name="ck-train", nnodes=2, world_size=2,
                    command=["python", "train.py"], run_dir=str(run), script=str(run / "job.sbatch"),
                    submitted_at=when, host="login1", plan={"spares": 1, "max_restarts": 2})
    store.save(rec)
    judged = ck.proc("doctor", "--logs", "--json", str(run / "logs"))
    verdict = replan.verdict_from_doctor(judged.out)
    assert (verdict.category, verdict.node) == ("gpu-hardware", "node3"), judged
    nodes = ("node1", "node3")
    run_ = recovery.Run(job_id=job_id, run_dir=str(run), restart=0, allocation=(*nodes, "node4"), nodes=nodes,
                        unused=("node4",), max_relaunches=3)
    step = replan.next_step(verdict, [], replan.Attempted(0, nodes, run_.unused, 3, restarts_left=2))
    assert isinstance(step, replan.Relaunch) and step.nodes == ("node1", "node4")
    recovery.record(run_, 1, verdict, step)
    return rec


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    no_slurm = tmp_path / "bin"
    no_slurm.mkdir()
    return {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state"), "PATH": str(no_slurm), "COLUMNS": "200"}


def test_three_recoveries_that_dropped_node3_keep_it_out_of_the_next_job(ck, tmp_path: Path,
                                                                          env: dict[str, str]) -> None:
    store = RecordStore(root=tmp_path / "state" / "jobs")
    for i, job in enumerate(("7301", "7302", "7303")):
        _recovered_job(ck, tmp_path, store, job, f"2099-01-0{i + 1}T10:00:00.000000Z")

    table = ck.proc("nodes", "--site", "testbed", "--json", env=env)
    assert table.code == 0 and table.err == "", table
    [node3] = json.loads(table.out)["nodes"]
    assert node3["node"] == "node3" and node3["failures"] == 3 and node3["recent_hardware"] == 3
    assert node3["verdicts"] == {"gpu-hardware": 3} and node3["sources"] == ["recovery"]
    assert node3["jobs"] == ["7303", "7302", "7301"] and node3["kept_out"] is True
    assert node3["last_detail"].startswith("attempt 0: doctor: gpu-hardware: ")

    plain = ck.proc("nodes", "--site", "testbed", env=env)
    assert plain.code == 0 and plain.err == "", plain
    [row] = [line for line in plain.out.splitlines() if line.startswith("node3 ")]
    assert row.split()[:3] == ["node3", "3", "3"] and "gpu-hardware x3" in row and "kept out" in row

    after = ck.proc(*RENDER, "--json", "--", "python", "train.py", env=env)
    assert after.code == 0, after
    doc = json.loads(after.out)
    assert "#SBATCH --exclude=node3\n" in doc["job_sbatch"]
    assert any(w.startswith("node history: keeping node3 out of the job") and "gpu-hardware x3 (jobs 7303, 7302, "
               "7301)" in w for w in doc["warnings"]), doc["warnings"]

    # doctor on one of them blames node3 again: the same failure, counted once
    assert ck.proc("doctor", "7303", env=env).code == 3
    [again] = json.loads(ck.proc("nodes", "--site", "testbed", "--json", env=env).out)["nodes"]
    assert (again["failures"], again["recent_hardware"]) == (3, 3)


def test_a_forged_attempts_record_is_skipped_with_one_warning_line(ck, tmp_path: Path, env: dict[str, str]) -> None:
    store = RecordStore(root=tmp_path / "state" / "jobs")
    rec = _recovered_job(ck, tmp_path, store, "7401", "2099-01-01T10:00:00.000000Z")
    path = attempts.path_for(rec.run_dir, "7401", 0)
    doc = json.loads(path.read_text())
    doc["attempts"][0]["dropped"] = [{"host": "node1;reboot", "why": "attempt 0: doctor: gpu-hardware\x1b[2J"}]
    path.write_text(json.dumps(doc))
    shown = ck.proc("nodes", "--site", "testbed", "--json", env=env)
    assert shown.code == 0 and json.loads(shown.out)["nodes"] == [], shown
    [line] = shown.err.splitlines()
    assert line.startswith("clusterkit: warning: node history: job 7401: attempts-7401.r0.json: "
                           "attempt entry 0: "), line
    assert "'node1;reboot' is not a valid host name" in line and line.endswith("; skipped") and "\x1b" not in line
