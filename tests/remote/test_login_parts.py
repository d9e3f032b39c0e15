"""The parts of working through a login node that need no SSH: the ``login:`` keys (file:line
errors), which of submit's words go to the login node, and the login node's checks of an upload
(a manifest that does not hash to its tree, an object that does not hash to its name, a path
leaving the tree)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from clusterkit.codesnap import store
from clusterkit.codesnap.checkout import UPLOAD_DIR, checkout, tree_manifest
from clusterkit.errors import SnapshotError
from tests.conftest import CLI, REPO, assert_one_line_error


def _site(tmp_path: Path, login: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"extends: {REPO / 'site_configs' / 'local.yaml'}\nname: s\nlogin:\n{login}")
    return path


@pytest.mark.parametrize(("login", "needle"), [
    ("  host: 'a b'\n", "s.yaml:4: login.host: 'a b': a host name"),
    ("  host: h\n  proxy_jump: 'j;rm -rf x'\n", "s.yaml:5: login.proxy_jump:"),
    ("  host: h\n  python: '-c'\n", "s.yaml:5: login.python:"),
    ("  host: h\n  port: 0\n", "s.yaml:5: login.port:"),
    ("  host: h\n  hots: x\n", "s.yaml:5: login.hots:"),
])
def test_login_keys_are_checked_with_their_line(ck: CLI, tmp_path: Path, login: str, needle: str) -> None:
    res = ck("sites", "validate", str(_site(tmp_path, login)))
    assert_one_line_error(res, 2, needle)


def test_only_the_login_nodes_words_are_forwarded() -> None:
    from clusterkit.cli.login import forwarded_args
    from clusterkit.cli.submit import submit

    words = ["--site", "x.yaml", "--job-name", "--follow", "-f", "--set=zero_stage=2", "--code", "src",
             "--wait", "--accept-new-host-keys", "--json", "--", "python", "train.py", "--follow", "--site", "y"]
    assert forwarded_args(submit, words) == ["--job-name", "--follow", "--set=zero_stage=2", "--json", "--",
                                             "python", "train.py", "--follow", "--site", "y"]


def _upload(home: Path, files: dict[str, bytes], workdir: str = "") -> str:
    """What a laptop leaves on the login node: objects, read-only, and the manifest."""
    root = home / UPLOAD_DIR
    for folder in (root.parent, root, root / "objects", root / "trees"):
        folder.mkdir(mode=0o700, exist_ok=True)
    entries = []
    for rel, data in sorted(files.items()):
        sha = hashlib.sha256(data).hexdigest()
        obj = store.object_path(root / "objects", sha, False)
        obj.parent.mkdir(mode=0o700, exist_ok=True)
        if not obj.exists():
            obj.write_bytes(data)
            obj.chmod(0o444)
        entries.append((rel, sha, False))
    tree, manifest = tree_manifest(entries, workdir)
    (root / "trees" / f"{tree}.json").write_bytes(manifest)
    return tree


def test_an_upload_is_made_into_a_tree_once(tmp_path: Path) -> None:
    tree = _upload(tmp_path, {"train.py": b"print(1)\n", "pkg/m.py": b"x = 1\n"}, workdir="pkg")
    path, workdir = checkout(tree, home=tmp_path)
    assert workdir == "pkg" and (path / "train.py").read_bytes() == b"print(1)\n"
    assert not (path / "pkg" / "m.py").stat().st_mode & 0o222
    assert checkout(tree, home=tmp_path)[0] == path


def test_an_object_that_does_not_hash_to_its_name_is_refused(tmp_path: Path) -> None:
    tree = _upload(tmp_path, {"train.py": b"print(1)\n"})
    obj = store.object_path(tmp_path / UPLOAD_DIR / "objects", hashlib.sha256(b"print(1)\n").hexdigest(), False)
    obj.chmod(0o644)
    obj.write_bytes(b"print('planted')\n")
    obj.chmod(0o444)
    with pytest.raises(SnapshotError, match="does not hash to its name"):
        checkout(tree, home=tmp_path)
    assert not (tmp_path / UPLOAD_DIR / "checkouts" / tree).exists()


@pytest.mark.parametrize("bad", ["../escape.py", "/etc/passwd", "a/./b.py"])
def test_a_manifest_leaving_the_tree_or_not_its_own_is_refused(tmp_path: Path, bad: str) -> None:
    tree = _upload(tmp_path, {"train.py": b"print(1)\n"})
    trees = tmp_path / UPLOAD_DIR / "trees"
    doc = json.loads((trees / f"{tree}.json").read_text())
    doc["files"][0][0] = bad
    (trees / f"{tree}.json").write_text(json.dumps(doc))
    with pytest.raises(SnapshotError, match="not \\(relative path"):
        checkout(tree, home=tmp_path)
    doc["files"][0][0] = "other.py"   # a path that is fine, but not the tree's: its hash says so
    (trees / f"{tree}.json").write_text(json.dumps(doc))
    with pytest.raises(SnapshotError, match="do not hash to the tree's name"):
        checkout(tree, home=tmp_path)


def test_an_upload_folder_others_may_write_is_refused(tmp_path: Path) -> None:
    tree = _upload(tmp_path, {"train.py": b"print(1)\n"})
    (tmp_path / UPLOAD_DIR / "objects").chmod(0o777)
    with pytest.raises(SnapshotError, match="another user could plant"):
        checkout(tree, home=tmp_path)


def test_what_the_login_nodes_submit_printed_is_read_as_data() -> None:
    from clusterkit.errors import SubmitError
    from clusterkit.remote.flow import _submitted_json

    one = _submitted_json('{"job_id": "41", "run_dir": "/r/a", "nodes": 4, "launcher": "srun", "x": [1]}\n', "h")
    assert one == [{"job_id": "41", "run_dir": "/r/a", "nodes": 4, "launcher": "srun"}]
    chain = '{"chain": [{"job_id": "42", "run_dir": "/r/1"}, {"job_id": "43", "run_dir": "/r/2"}]}'
    assert [d["job_id"] for d in _submitted_json(f"note\n{chain}\n", "h")] == ["42", "43"]
    for bad in ('{"job_id": "../x", "run_dir": "/r"}', '{"chain": [{"job_id": "42"}]}', "Submitted job 42", ""):
        with pytest.raises(SubmitError, match="printed no job id clusterkit can read"):
            _submitted_json(bad, "h")
