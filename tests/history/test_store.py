"""The node history file: bounded, atomic, and read as data someone else may have written."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from clusterkit.history import store
from clusterkit.history.store import Event, add, check_event, load


def ev(node: str = "node3", n: int = 1, *, source: str = "doctor", what: str = "gpu-hardware",
       job: str | None = None) -> Event:
    return Event(node, f"2026-11-{n % 28 + 1:02d}T10:00:{n % 60:02d}.{n:06d}Z", source, what, True,
                 job or str(1000 + n), "Xid 79: GPU has fallen off the bus")


def test_events_round_trip_and_a_second_sighting_is_not_a_second_failure(tmp_path: Path) -> None:
    path = tmp_path / "nodes" / "site.json"
    add(path, [ev(n=1), ev(n=2)])
    add(path, [ev(n=2), ev("node4", 3)])       # job 1002's verdict seen again (a second doctor)
    got = load(path)
    assert got.warnings() == []
    assert [(e.node, e.job) for e in got.events] == [("node3", "1001"), ("node3", "1002"), ("node4", "1003")]
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_the_newest_events_are_kept_within_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    many = [ev(f"n{i}", i) for i in range(store.MAX_EVENTS + 50)]
    add(path, many)
    got = load(path).events
    assert len(got) == store.MAX_EVENTS
    assert got[-1] == max(many, key=lambda e: (e.at, e.node))
    assert min(e.at for e in got) > min(e.at for e in many)      # the oldest went
    assert path.stat().st_size < store.MAX_BYTES


def test_an_event_a_source_got_wrong_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    add(path, [ev("node3; rm -rf ~", 1), ev("../../etc", 2), ev(job="12; x", n=3), ev("node5", 4)])
    assert [e.node for e in load(path).events] == ["node5"]


def test_parallel_writers_keep_every_event(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    threads = [threading.Thread(target=add, args=(path, [ev(f"n{i}", i)])) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(e.node for e in load(path).events) == sorted(f"n{i}" for i in range(16))


@pytest.mark.parametrize(("raw", "problem"), [
    ({"node": "node3 --all", "at": "2026-11-01T00:00:00Z", "source": "doctor", "what": "x", "hardware": True},
     "is not a host name"),
    ({"node": "node3", "at": "yesterday", "source": "doctor", "what": "x", "hardware": True}, "is not YYYY"),
    ({"node": "node3", "at": "2026-02-31T00:00:00Z", "source": "doctor", "what": "x", "hardware": True},
     "is no date"),
    ({"node": "node3", "at": "2026-11-01T00:00:00Z", "source": "admin", "what": "x", "hardware": True},
     "source 'admin' is not one of"),
    ({"node": "node3", "at": "2026-11-01T00:00:00Z", "source": "doctor", "what": "X Y", "hardware": True},
     "is not a check or category name"),
    ({"node": "node3", "at": "2026-11-01T00:00:00Z", "source": "doctor", "what": "x", "hardware": 1},
     "hardware is not true or false"),
    ({"node": "node3", "at": "2026-11-01T00:00:00Z", "source": "doctor", "what": "x", "hardware": True,
      "job": "../12"}, "is not a job id"),
    ({"node": "node3", "at": "2026-11-01T00:00:00Z", "source": "doctor", "what": "x", "hardware": True,
      "weight": 100}, "unknown field 'weight'"),
    (["node3"], "not an object"),
])
def test_each_bad_entry_is_named(raw: object, problem: str) -> None:
    got = check_event(raw)
    assert isinstance(got, str) and problem in got, got


def test_bad_entries_are_left_out_and_counted_the_rest_kept(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    good = {"node": "node1", "at": "2026-11-01T00:00:00Z", "source": "in-job", "what": "gpu.count",
            "hardware": True, "job": "7", "detail": "\x1b[2J\x1b]0;owned\x07gpu.count: 7 GPUs" + "x" * 5000}
    path.write_text(json.dumps({"version": 1, "events": [good, {"node": "-x"}, 5, good]}))
    got = load(path)
    assert len(got.events) == 1 and got.skipped == 2
    assert got.warnings() == [f"node history {path}: 2 entries left out (node '-x' is not a host name)"]
    detail = got.events[0].detail
    assert "\x1b" not in detail and "\x07" not in detail and len(detail) == store.MAX_DETAIL


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _symlink(path: Path) -> None:
    target = path.parent / "elsewhere.json"
    target.write_text(json.dumps({"version": 1, "events": []}))
    path.symlink_to(target)


def _huge(path: Path) -> None:
    with path.open("wb") as fh:   # sparse: a terabyte of nothing costs no disk
        fh.truncate(1 << 40)


@pytest.mark.parametrize(("make", "said"), [
    (_fifo, "not a regular file; ignored"),
    (_symlink, "not a regular file; ignored"),
    (_huge, "larger than 4 MiB; ignored"),
    (lambda p: p.write_bytes(b"\xff\xfe{not json"), "not JSON"),
    (lambda p: p.write_text("[" * 100_000), "not JSON"),
    (lambda p: p.write_text('{"version": 1, "events": [{"node": "n1", "at": NaN}]}'), "not JSON"),
    (lambda p: p.write_text('{"version": 99, "events": []}'), "not a clusterkit node history"),
    (lambda p: p.write_text('{"version": 1, "events": {}}'), "not a clusterkit node history"),
    (lambda p: p.mkdir(), "not a regular file; ignored"),
])
def test_a_file_that_is_no_history_is_ignored_with_one_line(tmp_path: Path, make, said: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "h.json"
    make(path)
    got = load(path)                      # returns at once: a FIFO is never opened for a blocking read
    assert got.events == []
    [line] = got.warnings()
    assert line.startswith(f"node history {path}: ") and said in line and "\n" not in line, line


def test_a_symlink_is_replaced_never_written_through(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    _symlink(path)
    before = (tmp_path / "elsewhere.json").read_text()
    add(path, [ev()])
    assert not path.is_symlink() and len(load(path).events) == 1
    assert (tmp_path / "elsewhere.json").read_text() == before


def test_a_directory_that_is_a_symlink_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "nodes").symlink_to(tmp_path / "real")
    with pytest.raises(store.HistoryError, match=r"not a directory \(or a symbolic link\)$"):
        add(tmp_path / "nodes" / "h.json", [ev()])
    assert list((tmp_path / "real").iterdir()) == []


def test_too_many_entries_are_cut_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    entry = {"node": "n1", "at": "2026-11-01T00:00:00Z", "source": "doctor", "what": "x", "hardware": False}
    path.write_text(json.dumps({"version": 1, "events": [entry] * (store.MAX_EVENTS * 2 + 10)}))
    got = load(path)
    assert len(got.events) == 1 and got.skipped == 10     # one event (the same key), ten entries unread


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_history_another_user_owns_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    add(path, [ev()])
    os.chown(path, 65534, 65534)
    got = load(path)
    assert got.events == [] and got.warnings() == [f"node history {path}: owned by another user (uid 65534); ignored"]
