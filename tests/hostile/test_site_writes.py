"""``sites drift --write`` and ``sites init --out`` write site files others read: values go
through the YAML emitter and are read back, a key a merge key brings in is refused (never
shadowed), and the write keeps the file's owner, mode, hard links, symlink and CRLF line ends,
syncs before the rename, leaves no temp file a site listing could take, and honours the umask.

The CLI cases run the real CLI against ``standin/scontrol`` (a stand-in for scontrol that prints
the captured Slurm 22.05.8 output of tests/data/sites/slurm-22.05): the cluster has 8 GPUs and
8 CPUs per node, so a site that says 4 and 16 has two facts to write."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
import yaml

from clusterkit.errors import ConfigError
from clusterkit.sites.writer import Edit, apply_edits, emit

from ..conftest import CLI

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

BODY = """\
scheduler:
  kind: slurm
  partition: debug
  time: "00:10:00"
network:
  fabric: ethernet
  socket_ifname: lo
storage:
  - {path: /tmp, type: local, shared: true, use: [data, checkpoints]}
"""
STALE_NODES = """\
nodes:
  nodelist: node[1-4]
  gpus_per_node: 4
  cpus_per_node: 16
  mem_gb: 62
  gpu_mem_gb: 80
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"PATH": f"{HERE / 'standin'}:{os.environ['PATH']}",
            "CK_STANDIN_DATA": str(REPO / "tests" / "data" / "sites" / "slurm-22.05"),
            "CLUSTERKIT_SITES": str(tmp_path / "sites"), "CLUSTERKIT_STATE_DIR": str(tmp_path / "state")}


def site(tmp_path: Path, text: str, name: str = "lab.yaml") -> Path:
    d = tmp_path / "sites"
    d.mkdir(exist_ok=True)
    path = d / name
    path.write_bytes(text.encode())
    return path


def drift_write(ck: CLI, env: dict[str, str], path: Path) -> tuple[int, str]:
    res = ck.proc("sites", "drift", str(path), "--write", env=env, timeout=60)
    return res.code, res.out + res.err


# --- merge keys: refused, never shadowed ------------------------------------------------------------

MERGE_TOP = "x-base: &base\n" + STALE_NODES.replace("\n  ", "\n    ").replace("nodes:", "  nodes:") + \
    "<<: *base\nname: lab\n" + BODY
MERGE_README = "x-defaults: &defaults\n  gpus_per_node: 4\n  cpus_per_node: 16\n  mem_gb: 62\n  gpu_mem_gb: 80\n" \
    "name: lab\nnodes:\n  <<: *defaults\n  nodelist: node[1-4]\n" + BODY
MERGE_LIST = "x-a: &a\n  gpus_per_node: 4\nx-b: &b\n  cpus_per_node: 16\n  mem_gb: 62\n  gpu_mem_gb: 80\n" \
    "name: lab\nnodes:\n  <<: [*a, *b]\n  nodelist: node[1-4]\n" + BODY


@pytest.mark.parametrize("text", [MERGE_TOP, MERGE_README, MERGE_LIST], ids=["top-level", "readme-form", "list"])
def test_a_key_a_merge_key_brings_in_is_refused_and_the_file_untouched(ck: CLI, env: dict[str, str],
                                                                       tmp_path: Path, text: str) -> None:
    path = site(tmp_path, text)
    assert yaml.safe_load(text)["nodes"]["gpus_per_node"] == 4
    code, out = drift_write(ck, env, path)
    assert code == 2, out
    assert "merge key" in out and "Traceback" not in out
    assert path.read_text() == text
    assert not [p.name for p in path.parent.iterdir() if p.name != path.name]  # no temp left


def test_an_own_key_beside_a_merge_key_is_written(ck: CLI, env: dict[str, str], tmp_path: Path) -> None:
    text = "x-d: &d\n  gpu_mem_gb: 80\n  mem_gb: 62\nname: lab\nnodes:\n  <<: *d\n  nodelist: node[1-4]\n" \
           "  gpus_per_node: 4\n  cpus_per_node: 16\n" + BODY
    path = site(tmp_path, text)
    code, out = drift_write(ck, env, path)
    assert code in (0, 1), out
    data = yaml.safe_load(path.read_text())
    assert (data["nodes"]["gpus_per_node"], data["nodes"]["cpus_per_node"], data["nodes"]["gpu_mem_gb"]) == (8, 8, 80)


# --- values through the emitter, read back ----------------------------------------------------------

HOSTILE_VALUES = ["mlx5_1, mlx5_9", "mlx5_1] #", "*x", "{x", "&a", "!tag", "|", ">", "'q", '"q', "a: b", "#c",
                  "- x", "yes", "no", "on", "null", "~", "1e3", "0x10", "08", "2026-01-01", "x\U0001F600y",
                  "a\x01b", "a\u2028b", "a\x85b", "tab\there", " lead", "trail ", "", "@x", "`x", "%x", "? x"]


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_a_hostile_hca_name_is_written_as_itself(value: str) -> None:
    text = "name: lab\nnodes:\n  nodelist: node1\nnetwork:\n  fabric: infiniband\n  hcas: [mlx5_0]\n"
    new = apply_edits(text, [Edit("network", "hcas", [value, "mlx5_2"])])
    assert yaml.safe_load(new)["network"]["hcas"] == [value, "mlx5_2"]
    assert new.splitlines()[:5] == text.splitlines()[:5]  # the other lines as they were
    assert yaml.safe_load(f"[{emit(value)}]") == [value]


def test_a_block_list_and_a_quoted_scalar_keep_their_style() -> None:
    text = "name: lab\nnodes:\n  nodelist: 'node1'\nnetwork:\n  hcas:\n    - mlx5_0\n    - mlx5_1\n"
    new = apply_edits(text, [Edit("network", "hcas", ["mlx5_1, x", "y"]), Edit("nodes", "nodelist", "node[1-2]")])
    assert "    - 'mlx5_1, x'\n    - y\n" in new and "nodelist: 'node[1-2]'" in new
    assert yaml.safe_load(new)["network"]["hcas"] == ["mlx5_1, x", "y"]


def test_an_edit_that_would_change_other_keys_is_refused() -> None:
    # a section merged in at the top level: an own section would shadow all of it
    with pytest.raises(ConfigError, match="merge key"):
        apply_edits(MERGE_TOP, [Edit("nodes", "gpus_per_node", 8)])


# --- the write itself ---------------------------------------------------------------------------------

def stale(tmp_path: Path, newline: str = "\n") -> Path:
    return site(tmp_path, ("name: lab\n" + STALE_NODES + BODY).replace("\n", newline))


def test_crlf_line_ends_are_kept(ck: CLI, env: dict[str, str], tmp_path: Path) -> None:
    path = stale(tmp_path, "\r\n")
    code, out = drift_write(ck, env, path)
    assert code in (0, 1), out
    raw = path.read_bytes()
    assert raw.count(b"\r\n") == raw.count(b"\n") and b"gpus_per_node: 8\r\n" in raw


def test_mixed_line_ends_are_refused(ck: CLI, env: dict[str, str], tmp_path: Path) -> None:
    path = stale(tmp_path, "\r\n")
    path.write_bytes(path.read_bytes().replace(b"name: lab\r\n", b"name: lab\n"))
    before = path.read_bytes()
    code, out = drift_write(ck, env, path)
    assert code == 2 and "CRLF and LF" in out, out
    assert path.read_bytes() == before


def test_mode_owner_hard_link_and_symlink_are_kept(ck: CLI, env: dict[str, str], tmp_path: Path) -> None:
    path = stale(tmp_path)
    path.chmod(0o640)
    other = tmp_path / "hardlink.yaml"
    os.link(path, other)
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)  # nobody: a root --write must not take the file over
    before = path.stat()
    code, out = drift_write(ck, env, path)
    assert code in (0, 1), out
    after = path.stat()
    assert (after.st_ino, after.st_nlink, stat.S_IMODE(after.st_mode)) == (before.st_ino, 2, 0o640)
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    assert "gpus_per_node: 8" in other.read_text()  # the other link sees the edit
    # a symlinked site: the target is edited, the link stays a link
    target = stale(tmp_path, "\n")
    target.rename(tmp_path / "real.yaml")
    link = tmp_path / "sites" / "lab.yaml"
    link.symlink_to(tmp_path / "real.yaml")
    code, out = drift_write(ck, env, link)
    assert code in (0, 1), out
    assert link.is_symlink() and "gpus_per_node: 8" in (tmp_path / "real.yaml").read_text()


def test_owner_kept_by_rename_when_root(ck: CLI, env: dict[str, str], tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    path = stale(tmp_path)
    os.chown(path, 65534, 65534)
    code, out = drift_write(ck, env, path)
    assert code in (0, 1), out
    assert (path.stat().st_uid, path.stat().st_gid) == (65534, 65534)
    assert "gpus_per_node: 8" in path.read_text()


def test_a_temp_file_left_by_a_killed_write_is_no_site(ck: CLI, env: dict[str, str], tmp_path: Path) -> None:
    path = stale(tmp_path)
    (path.parent / ".lab.yaml.k2j4.ck-tmp").write_text(path.read_text().replace("name: lab", "name: ghost"))
    (path.parent / ".lab.yaml.x1y2.yaml").write_text(path.read_text().replace("name: lab", "name: ghost2"))
    res = ck.proc("sites", "list", env=env, timeout=60)
    assert res.code == 0 and "ghost" not in res.out, res.out
    res = ck.proc("sites", "drift", "--all", env=env, timeout=60)
    assert "ghost" not in res.out + res.err


def test_a_write_that_fails_validation_leaves_no_temp_and_names_the_site(tmp_path: Path) -> None:
    from clusterkit.sites.writer import write_validated

    path = stale(tmp_path)
    before = path.read_text()
    with pytest.raises(ConfigError) as err:
        write_validated(path, before.replace("gpus_per_node: 4", "gpus_per_node: 400"))
    said = str(err.value)
    assert str(path) in said and "ck-tmp" not in said and "line 4: nodes.gpus_per_node" in said
    assert path.read_text() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["lab.yaml"]


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_init_out_honours_the_umask(ck: CLI, env: dict[str, str], tmp_path: Path, mask: int) -> None:
    out = tmp_path / f"new-{mask:o}.yaml"
    old = os.umask(mask)
    try:
        res = ck.proc("sites", "init", "new", "--from-slurm", "--out", str(out), env=env, timeout=60)
    finally:
        os.umask(old)
    assert res.code == 0, res.out + res.err
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~mask


# --- sites init: values from Slurm through the emitter, comments one printable line -------------------

DATA = REPO / "tests" / "data" / "sites" / "slurm-22.05"
CLUSTER_NAMES = ["*x", "{x", "a, b", "x\U0001F600", "#c", "yes", "a: b", "&anchor", "[x]", "1e3", "null"]


@pytest.mark.parametrize("cluster", CLUSTER_NAMES)
def test_init_writes_a_hostile_cluster_name_as_itself(ck: CLI, env: dict[str, str], tmp_path: Path,
                                                      cluster: str) -> None:
    data = tmp_path / "captures"
    data.mkdir()
    for name in ("show-config.txt", "show-partition-o.txt", "show-node-o.txt"):
        text = (DATA / name).read_text()
        if name == "show-config.txt":
            text = re.sub(r"(?m)^ClusterName\s*=.*$", f"ClusterName             = {cluster}", text)
        (data / name).write_text(text)
    res = ck.proc("sites", "init", "lab", "--from-slurm", env={**env, "CK_STANDIN_DATA": str(data)}, timeout=60)
    assert res.code == 0, res.out + res.err
    assert yaml.safe_load(res.out)["scheduler"]["cluster"] == cluster


@pytest.mark.parametrize("junk", ["\x1c", "\x85", "\u2028", "\r", "\x1b[2J", "\x00", "\x7f"])
def test_init_comments_stay_one_line_whatever_slurm_says(ck: CLI, env: dict[str, str], tmp_path: Path,
                                                         junk: str) -> None:
    nodes = tmp_path / "nodes.txt"
    nodes.write_text((DATA / "show-node-o.txt").read_text().replace(
        "AvailableFeatures=(null)", f"AvailableFeatures=ib,{junk}nodes: {{evil: 1}}"))
    res = ck.proc("sites", "init", "lab", "--from-slurm", env={**env, "CK_STANDIN_NODES": str(nodes)}, timeout=60)
    assert res.code == 0, res.out + res.err
    data = yaml.safe_load(res.out)
    assert data["nodes"]["nodelist"] == "node[1-4]" and "evil" not in data["nodes"]
    assert "# features: ib," in res.out


def test_a_site_removed_or_unwritable_at_write_time_is_a_config_error(tmp_path: Path) -> None:
    from clusterkit.sites.writer import write_validated

    path = stale(tmp_path)
    text = path.read_text().replace("gpus_per_node: 4", "gpus_per_node: 8")
    path.unlink()  # removed between the read and the write
    with pytest.raises(ConfigError, match="nothing written"):
        write_validated(path, text)
    assert not list(path.parent.iterdir())
    if os.geteuid() != 0:  # root writes through permission bits
        path = stale(tmp_path)
        path.parent.chmod(0o555)
        try:
            with pytest.raises(ConfigError, match="nothing written"):
                write_validated(path, text)
        finally:
            path.parent.chmod(0o755)
