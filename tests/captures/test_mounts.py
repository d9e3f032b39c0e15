"""Real mount tables (tests/data/captures/mounts) through the parser and preflight's ``storage.mounted``.

Two forms reach the parser: ``/proc/mounts`` (what the node script's mounts section reads:
six fields, octal escapes) and the ``mount`` command's ``SOURCE on PATH type FSTYPE (OPTIONS)``
lines, which is how people paste a mount table.  ``<name>.expected.json`` holds, read off by
hand, the sources and mount points of each file-system type, the number of entries, and for
some storage entries a site might declare (path, type) whether the path is served by a mount
of that type.  The /proc/mounts captures also go through the real section as a node's
``/proc/mounts``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from clusterkit.config.schema import Storage
from clusterkit.nodes import parsers as P
from clusterkit.nodes.script import SectionOutput
from clusterkit.nodes.sections import mounts_section
from clusterkit.preflight.catalogue import Expectations, StorageExpect, select_checks
from tests.captures.capture import Capture, captures, env_with
from tests.captures.test_ibstat import HEALTHY_SMI, _init

CAPTURES = captures("mounts")


def by_type(mounts: tuple[P.Mount, ...]) -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {}
    for m in mounts:
        out.setdefault(m.fstype, []).append([m.source, m.mountpoint])
    return out


def judge(text: str, path: str, kind: str) -> str:
    """The real storage.mounted check of a multi-node stage for one storage entry, on ``text``."""
    expect = Expectations(stage="multi-node", gpus_per_node=8,
                          storage=(StorageExpect(path, kind, 0.0, False, 10.0, True),))
    (check,) = [c for c in select_checks(expect).checks if c.name == "storage.mounted"]
    parsed = check.parse(text)
    assert not isinstance(parsed, P.ParseFailure), parsed
    verdict = check.judge(parsed, SectionOutput("mounts", text, "0"))
    return "ok" if verdict.passed else "fail"


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_entries_are_read_as_by_hand(cap: Capture) -> None:
    mounts = P.parse_mounts(cap.body)
    assert isinstance(mounts, tuple), mounts
    assert len(mounts) == cap.expected["count"]
    got = by_type(mounts)
    for fstype, entries in cap.expected["mounts_of"].items():
        assert got.get(fstype) == entries, fstype


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_storage_mounted_judges_each_declared_type(cap: Capture) -> None:
    got = [[path, kind, judge(cap.body, path, kind)] for path, kind, _ in cap.expected["storage"]]
    assert got == cap.expected["storage"]


@pytest.mark.parametrize("cap", [c for c in CAPTURES if not c.header["command"].startswith("mount")],
                         ids=lambda c: c.name)
def test_proc_mounts_through_the_node_section(cap: Capture, tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "mounts").write_text(cap.body)
    env = {"CK_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin"}
    p = subprocess.run(["bash", "-c", mounts_section().command], env=env, capture_output=True, text=True, check=True)
    assert p.stdout == cap.body
    for path, kind, verdict in cap.expected["storage"]:
        assert judge(p.stdout, path, kind) == verdict, (path, kind)


def test_every_shared_type_of_the_site_schema_is_covered() -> None:
    """Each shared storage type a site may declare has a capture showing it mounted."""
    kinds = {kind for cap in CAPTURES for _, kind, verdict in cap.expected["storage"] if verdict == "ok"}
    declared = set(Storage.model_fields["type"].annotation.__args__) - {"local"}
    assert declared <= kinds, declared - kinds


def test_mount_command_lines_with_a_space_in_the_mount_point() -> None:
    """``mount`` does not escape spaces: the mount point runs to the last `` type ``."""
    mounts = P.parse_mounts("fs1 on /ibm/my fs type gpfs (rw,relatime)\n")
    assert isinstance(mounts, tuple)
    assert [(m.source, m.mountpoint, m.fstype, m.options) for m in mounts] == [
        ("fs1", "/ibm/my fs", "gpfs", ("rw", "relatime"))]
    assert isinstance(P.parse_mounts("fs1 on /ibm/fs1 type gpfs\n"), P.ParseFailure)


SITES_INIT = {   # the shared file systems sites init writes for a node with this mount table (read off by hand)
    "gpfsexporter-osc-pitzer-proc-mounts": [("/", "nfs"), ("/fs/project", "gpfs"), ("/fs/scratch", "gpfs"),
                                            ("/users/PZS0710", "nfs")],
    "beegfsgo-proc-mounts-two": [("/mnt/2beegfs", "beegfs"), ("/mnt/beegfs", "beegfs")],
    "golustre-mtab-lustre-lhsmd": [("/mnt/lustre", "lustre"), ("/var/lib/lhsmd/roots/lhsm-plugin-posix", "lustre"),
                                   ("/var/lib/lhsmd/roots/lhsm-plugin-s3", "lustre")],
}


@pytest.mark.parametrize("name", sorted(SITES_INIT))
def test_sites_init_writes_the_shared_file_systems_of_the_mount_table(name: str, tmp_path: Path) -> None:
    """The capture as a node's /proc/mounts (its sysroot), probed by the real mounts section:
    the draft's ``storage:`` names each Lustre, NFS, GPFS and BeeGFS mount with its type."""
    (cap,) = [c for c in CAPTURES if c.path.stem == name]
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "mounts").write_text(cap.body)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvidia-smi").symlink_to(HEALTHY_SMI)
    env = {**env_with(tmp_path / "bin"), "CLUSTERKIT_SYSROOT": str(root)}
    text, _ = _init(tmp_path, env)
    got = re.findall(r'^  - \{path: "([^"]+)", type: (\w+)\}', text, re.MULTILINE)
    assert got == SITES_INIT[name], text
