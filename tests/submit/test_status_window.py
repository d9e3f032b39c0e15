"""`status` reads only what it shows: the newest --limit records plus those whose job has not
ended, found through the records directory's open index, not by reading every record."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from clusterkit.scheduler import jobs, records
from clusterkit.scheduler.records import OPEN_INDEX, JobRecord, RecordStore


def _record(tmp_path: Path, n: int, **kw: object) -> JobRecord:
    base: dict[str, object] = dict(
        job_id=str(1000 + n), scheduler="local", site="local", site_source="site_configs/local.yaml",
        stage="single-node", launcher="torchrun", job_name=f"sweep-{n}", nnodes=1, world_size=1,
        command=["python", "train.py"], run_dir=str(tmp_path / f"run{n}"),
        script=str(tmp_path / f"run{n}/job.sh"), submitted_at=f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}.000000Z",
        host=socket.gethostname(), plan={}, state="COMPLETED", exit_code=0)
    base.update(kw)
    Path(str(base["run_dir"])).mkdir(exist_ok=True)
    return JobRecord(**base)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RecordStore:
    """100 ended jobs, two of them older ones still open: job 1005 (its result file has
    appeared since) and job 1010 (a local job of another host: it stays UNKNOWN)."""
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path / "state"))
    st = RecordStore()
    for n in range(100):
        if n == 5:
            rec = _record(tmp_path, n, state=None, exit_code=None)
        elif n == 10:
            rec = _record(tmp_path, n, state=None, exit_code=None, host="other-login-node")
        else:
            rec = _record(tmp_path, n)
        st.save(rec)
    (tmp_path / "run5" / "1005.result").write_text("3\n")  # the job ended meanwhile
    return st


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = records.load_record

    def counting(path: Path) -> JobRecord:
        seen.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(records, "load_record", counting)
    return seen


def test_overview_reads_the_newest_and_the_open_records_only(store: RecordStore,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert sorted(p.name for p in (store.root / OPEN_INDEX).iterdir()) == [
        p.name for p in store.files() if p.name.endswith(("-1005.json", "-1010.json"))]
    seen = _reads(monkeypatch)
    view = jobs.overview(store, 20)
    ids = [r["job_id"] for r in view.rows]
    assert ids == ["1005", "1010"] + [str(1000 + n) for n in range(80, 100)]  # oldest first
    assert len(set(seen)) == 22 and not view.unreadable  # (caching 1005 re-reads it once)
    rows = {r["job_id"]: r for r in view.rows}
    assert (rows["1005"]["state"], rows["1005"]["exit_code"]) == ("FAILED", 3)  # refreshed...
    assert rows["1010"]["state"] == "UNKNOWN"
    seen.clear()
    assert [r["job_id"] for r in jobs.overview(store, 20).rows][:1] == ["1010"]  # ...and cached:
    assert len(set(seen)) == 21                                                       # 1005 is not read again


def test_a_record_outside_the_window_is_not_read_at_all(store: RecordStore, ck) -> None:  # type: ignore[no-untyped-def]
    old = store.files()[30]
    old.write_bytes(b"\x80 not a record")  # an ended job's record, damaged later
    res = ck("status", "--json", "--limit", "20")
    assert res.code == 0 and "unreadable" not in res.err
    assert len(json.loads(res.out)["jobs"]) == 22
    wide = ck("status", "--json", "--limit", "100")
    assert f"skipping unreadable record: {old}: not a job record" in wide.err


def test_status_job_opens_only_the_matching_records(store: RecordStore, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _reads(monkeypatch)
    look = jobs.look(store, "1042")
    assert look.record.job_name == "sweep-42" and seen == [store.path_for(look.record).name]


def test_the_open_index_is_rebuilt_where_it_is_missing(store: RecordStore) -> None:
    shutil.rmtree(store.root / OPEN_INDEX)  # a records directory of an older clusterkit
    (store.root / "20250101T000000000000-local-7.json").write_bytes(b"{broken")
    recs, bad = store.recent(3)
    assert [r.job_id for r in recs] == ["1005", "1010", "1097", "1098", "1099"]
    assert len(bad) == 1  # an unreadable record stays in view, so status keeps warning about it
    store.update(recs[0], state="FAILED", exit_code=3)  # ended: leaves the index
    assert [r.job_id for r in store.recent(3)[0]] == ["1010", "1097", "1098", "1099"]
