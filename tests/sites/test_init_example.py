"""``sites init NAME --from-example EXAMPLE``: a site without live Slurm access, from a shipped
example, its comments kept, and the partial it extends written beside it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_one_line_error


@pytest.fixture
def no_slurm(tmp_path: Path) -> dict[str, str]:
    """A PATH whose scontrol/sinfo/squeue only leave a mark: the command must not call Slurm."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("scontrol", "sinfo", "squeue", "sacct"):
        (bin_dir / tool).write_text(f'#!/bin/sh\n# stand-in: records that Slurm was asked\n'
                                    f'echo {tool} >> "{tmp_path}/slurm.calls"\nexit 1\n')
        (bin_dir / tool).chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_a_site_from_an_example_keeps_its_comments_and_needs_no_slurm(ck, tmp_path: Path,
                                                                       no_slurm: dict[str, str]) -> None:
    out = tmp_path / "sites" / "mine.yaml"
    out.parent.mkdir()
    res = ck.proc("sites", "init", "mine", "--from-example", "ib-h100", "--out", str(out), env=no_slurm)
    assert res.code == 0, res
    assert not (tmp_path / "slurm.calls").exists()
    example = (REPO / "site_configs" / "ib-h100.yaml").read_text().splitlines()
    written = out.read_text().splitlines()
    assert written[0].startswith("# mine: drafted from clusterkit's example site 'ib-h100'")
    assert "clusterkit sites drift mine" in "\n".join(written[:3])
    body = written[3:]
    assert len(body) == len(example)
    assert [a for a, b in zip(body, example, strict=True) if a != b] == ["name: mine"]
    assert sum(line.lstrip().startswith("#") or " # " in line for line in body) > 10  # the comments kept
    partial = out.parent / "_slurm-defaults.yaml"
    assert partial.read_text() == (REPO / "site_configs" / "_slurm-defaults.yaml").read_text()
    assert f"wrote {partial}" in res.err and "fill in:" in res.err
    shown = ck.proc("sites", "show", str(out), "--json", env=no_slurm)
    assert shown.code == 0 and '"name": "mine"' in shown.out and '"nodelist": "gpu[001-064]"' in shown.out, shown
    assert ck.proc("sites", "validate", str(out), str(partial)).code == 0


def test_printed_without_out_and_an_existing_partial_is_kept(ck, tmp_path: Path, no_slurm: dict[str, str]) -> None:
    printed = ck.proc("sites", "init", "lab", "--from-example", "eth-nfs", env=no_slurm)
    assert printed.code == 0 and "\nname: lab" in printed.out, printed
    assert "extends _slurm-defaults.yaml" in printed.err
    own = tmp_path / "_slurm-defaults.yaml"
    own.write_text("# the site's own defaults\nscheduler:\n  time: '01:00:00'\n")
    res = ck.proc("sites", "init", "lab", "--from-example", "eth-nfs", "--out", str(tmp_path / "lab.yaml"))
    assert res.code == 0, res
    assert own.read_text().startswith("# the site's own defaults")
    assert (tmp_path / "lab.yaml").read_text() == printed.out


@pytest.mark.parametrize("args,message", [
    (("--from-example", "dgx-superpod"), "--from-example 'dgx-superpod': not an example site; choose one of"),
    (("--from-example", "_slurm-defaults"), "not an example site"),
    ((), "sites init needs one of --from-slurm or --from-example EXAMPLE"),
    (("--from-slurm", "--from-example", "ib-h100"), "sites init needs one of"),
    (("--from-example", "ib-h100", "--partition", "gpu"), "--partition only make sense with --from-slurm"),
])
def test_bad_requests_write_nothing(ck, tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    out = tmp_path / "x.yaml"
    res = ck.proc("sites", "init", "x", *args, "--out", str(out))
    assert_one_line_error(res, 2, message)
    assert list(tmp_path.iterdir()) == []


def test_an_existing_site_file_is_never_overwritten(ck, tmp_path: Path) -> None:
    out = tmp_path / "mine.yaml"
    out.write_text("name: mine\n")
    res = ck.proc("sites", "init", "mine", "--from-example", "roce-a100", "--out", str(out))
    assert_one_line_error(res, 2, "file exists")
    assert out.read_text() == "name: mine\n"
