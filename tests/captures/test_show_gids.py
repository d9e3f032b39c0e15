"""Real ``show_gids`` tables (tests/data/captures/show_gids) through preflight's ``roce.gid``.

``show_gids`` prints what it reads in sysfs: per port and index ``gids/N`` and
``gid_attrs/types/N``, whose kernel strings ``IB/RoCE v1`` and ``RoCE v2`` it prints as
``v1``/``v2`` (it keeps what follows the ``v``).  Each captured row is written back as those
two files of a node's sysroot; an index the table has no row for is an unset entry, which the
kernel shows as an all-zero ``gids/N`` and refuses to give a type for (NCCL#1573 describes it).
The real GID section of the node script reads the tree, the real parser and check judge it,
for each index a site might pin; ``<name>.expected.json`` holds the rows and the verdicts
read off by hand.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from clusterkit.nodes import parsers as P
from clusterkit.nodes.script import SectionOutput
from clusterkit.nodes.sections import gid_section
from clusterkit.preflight.catalogue import Expectations, _gid_checks
from tests.captures.capture import Capture, captures

CAPTURES = captures("show_gids")
KERNEL_TYPE = {"v1": "IB/RoCE v1", "v2": "RoCE v2"}   # drivers/infiniband/core/cache.c, gid_type_str
ZERO = ":".join(["0000"] * 8)
WHY = " (NCCL_IB_GID_INDEX would hang or fail with RETRY_EXC_ERR)"


def rows(body: str) -> list[list[str]]:
    """The table's rows: DEV PORT INDEX GID [IPv4] VER NETDEV (no IPv4 column on non-IPv4 GIDs)."""
    out = []
    for line in body.splitlines():
        words = line.split()
        if len(words) >= 6 and words[0] not in ("DEV", "---"):
            dev, port, index, gid, *rest = words
            ipv4 = rest[0] if len(rest) == 3 else ""
            out.append([dev, port, index, gid, ipv4, rest[-2], rest[-1]])
    return out


def sysroot(cap: Capture, root: Path, unset: int) -> Path:
    for dev, port, index, gid, _ipv4, ver, _ndev in rows(cap.body):
        base = root / "sys" / "class" / "infiniband" / dev / "ports" / port
        (base / "gids").mkdir(parents=True, exist_ok=True)
        (base / "gid_attrs" / "types").mkdir(parents=True, exist_ok=True)
        (base / "gids" / index).write_text(gid + "\n")
        (base / "gid_attrs" / "types" / index).write_text(KERNEL_TYPE[ver] + "\n")
    for ports in (root / "sys" / "class" / "infiniband").glob("*/ports/*"):
        if not (ports / "gids" / str(unset)).exists():
            (ports / "gids" / str(unset)).write_text(ZERO + "\n")
    return root


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_rows_are_read_as_by_hand(cap: Capture) -> None:
    assert rows(cap.body) == cap.expected["rows"]


@pytest.mark.parametrize("cap", CAPTURES, ids=[c.name for c in CAPTURES])
def test_pinned_gid_index_through_the_node_section_and_check(cap: Capture, tmp_path: Path) -> None:
    hcas = tuple(cap.expected["hcas"])
    got = {}
    for index in cap.expected["pinned"]:
        root = sysroot(cap, tmp_path / f"root{index}", int(index))
        section = gid_section(int(index))
        p = subprocess.run(["bash", "-c", section.command], env={"CK_ROOT": str(root), "PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, check=True)
        parsed = P.parse_gids(p.stdout)
        assert isinstance(parsed, tuple), parsed
        (check,) = _gid_checks(Expectations(stage="multi-node", gpus_per_node=8, fabric="roce", hcas=hcas,
                                            gid_index=int(index)))
        verdict = check.judge(parsed, SectionOutput("gid", p.stdout, "0"))
        if verdict.passed:
            got[index] = "ok"
        else:   # every failure ends with what it would do to NCCL
            assert verdict.message.endswith(WHY), verdict.message
            got[index] = f"fail: {verdict.message.removesuffix(WHY)}"
    assert got == cap.expected["pinned"]
