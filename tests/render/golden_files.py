"""Compare rendered files with a golden folder, or write the folder anew under ``--regen-golden``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def regenerated(request: pytest.FixtureRequest, golden: Path, files: dict[str, str]) -> bool:
    """Under ``--regen-golden``: the golden folder written anew from ``files`` (True); else False."""
    if not request.config.getoption("--regen-golden"):
        return False
    shutil.rmtree(golden, ignore_errors=True)
    golden.mkdir(parents=True)
    for name, text in files.items():
        (golden / name).write_text(text)
    return True


def regen_or_compare(request: pytest.FixtureRequest, golden: Path, files: dict[str, str], what: str) -> None:
    """``files`` (name -> normalised text) must be the golden folder's files, byte for byte."""
    if regenerated(request, golden, files):
        return
    expected = {p.name: p.read_text() for p in sorted(golden.iterdir())} if golden.is_dir() else {}
    assert sorted(files) == sorted(expected), f"{what}: other files than the golden's (regenerate with --regen-golden)"
    for name, text in files.items():
        assert text == expected[name], f"{what}/{name} differs (regenerate with --regen-golden)"
