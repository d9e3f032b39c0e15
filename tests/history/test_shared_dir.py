"""The site's shared history directory: other users' failures count, capped, and only as theirs.

Files of other users are made here by giving them to real accounts of this system (daemon, bin,
sys, nobody) with chown, which needs root; the commands run as the user running the tests.
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="giving files to other users needs root")


def _events(node: str, n: int) -> list[dict[str, object]]:
    return [{"node": node, "at": f"2099-01-0{i + 1}T00:00:00Z", "source": "doctor", "what": "gpu-hardware",
             "hardware": True, "job": str(900 + i)} for i in range(n)]


def _theirs(shared: Path, user: str, events: list[dict[str, object]], owner: str | None = None) -> None:
    path = shared / f"testbed@{user}.json"
    path.write_text(json.dumps({"version": 1, "events": events}))
    uid = pwd.getpwnam(owner or user).pw_uid
    os.chown(path, uid, uid)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)      # as /tmp: everyone creates, only the owner replaces
    site = tmp_path / "testbed.yaml"
    site.write_text(f"extends: {REPO / 'site_configs' / 'testbed.yaml'}\nnode_history: {{shared_dir: '{shared}'}}\n")
    return shared, site, {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")}


def _nodes(ck, site: Path, env: dict[str, str]) -> tuple[dict[str, dict[str, object]], list[str]]:  # type: ignore[no-untyped-def]
    res = ck.proc("nodes", "--site", str(site), "--json", env=env)
    assert res.code == 0 and "Traceback" not in res.err, res
    return {n["node"]: n for n in json.loads(res.out)["nodes"]}, res.err.splitlines()


def test_one_other_user_counts_once_and_several_users_keep_a_node_out(ck, setup) -> None:  # type: ignore[no-untyped-def]
    shared, site, env = setup
    _theirs(shared, "daemon", _events("node1", 9))          # nine failures of one user: one counts
    got, err = _nodes(ck, site, env)
    assert err == []
    assert (got["node1"]["recent_hardware"], got["node1"]["other_users"], got["node1"]["kept_out"]) == (1, 1, False)
    assert got["node1"]["jobs"] == []                        # their jobs are not listed as the user's
    _theirs(shared, "bin", _events("node1", 1))
    _theirs(shared, "sys", _events("node1", 1))
    got, _ = _nodes(ck, site, env)
    assert (got["node1"]["recent_hardware"], got["node1"]["other_users"], got["node1"]["kept_out"]) == (3, 3, True)
    render = ck.proc("render", "--site", str(site), "--stage", "multi-node", "--nodes", "2", "--gpus-per-node", "1",
                     "--json", "--", "python", "train.py", env=env)
    assert render.code == 0 and "#SBATCH --exclude=node1\n" in json.loads(render.out)["job_sbatch"], render


def test_a_file_not_its_named_user_s_or_no_account_s_counts_for_nothing(ck, setup) -> None:  # type: ignore[no-untyped-def]
    shared, site, env = setup
    _theirs(shared, "daemon", _events("node1", 1), owner="nobody")     # nobody wrote daemon's file
    _theirs(shared, "no-such-user-x", _events("node1", 1), owner="bin")
    (shared / "testbed@bin.json").symlink_to(shared / "testbed@no-such-user-x.json")
    got, err = _nodes(ck, site, env)
    assert got == {}
    assert len(err) == 2 and all(line.startswith("clusterkit: warning: node history ") for line in err), err
    assert any("testbed@daemon.json: owned by another user (uid 65534); ignored" in line for line in err), err
    assert any("testbed@bin.json: not a regular file; ignored" in line for line in err), err


@pytest.mark.parametrize(("mode", "owner", "said"), [
    (0o777, "root", "is writable by others without the sticky bit"),
    (0o1777, "nobody", "is owned by uid 65534, not root"),
])
def test_a_shared_directory_anyone_could_rewrite_is_ignored(ck, setup, mode: int, owner: str, said: str) -> None:  # type: ignore[no-untyped-def]
    shared, site, env = setup
    _theirs(shared, "daemon", _events("node1", 1))
    _theirs(shared, "bin", _events("node1", 1))
    _theirs(shared, "sys", _events("node1", 1))
    shared.chmod(mode)
    uid = pwd.getpwnam(owner).pw_uid
    os.chown(shared, uid, uid)
    got, err = _nodes(ck, site, env)
    assert got == {}
    assert err == [f"clusterkit: warning: node history: shared directory {shared} {said}"
                   + (" (any user could replace any file); ignored" if "sticky" in said else "; ignored")]


def test_the_user_s_own_history_is_shared_readable_by_all(ck, setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    shared, site, env = setup
    own = tmp_path / "state" / "nodes" / "testbed.json"
    own.parent.mkdir(parents=True)
    own.write_text(json.dumps({"version": 1, "events": _events("node2", 2)}))
    got, err = _nodes(ck, site, env)
    assert err == [] and got["node2"]["failures"] == 2 and got["node2"]["other_users"] == 0
    mine = shared / f"testbed@{pwd.getpwuid(os.geteuid()).pw_name}.json"
    assert mine.stat().st_mode & 0o777 == 0o644
    assert [e["node"] for e in json.loads(mine.read_text())["events"]] == ["node2", "node2"]
