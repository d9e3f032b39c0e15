"""The lanes of a parallel run (tests/lanes.py): every Slurm test file named for the second Slurm
lane exists, and each test goes to the lane its path, fixtures and marks say."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.lanes import LIFE, SLURM_DIR, lane


def _item(path: Path, fixtures: tuple[str, ...] = (), marks: tuple[str, ...] = ()) -> Any:
    return SimpleNamespace(fspath=path, fixturenames=fixtures,
                           get_closest_marker=lambda name: name if name in marks else None)


def test_every_file_of_the_second_slurm_lane_exists() -> None:
    assert sorted(name for name in LIFE if not (SLURM_DIR / f"{name}.py").is_file()) == []


@pytest.mark.parametrize(("path", "fixtures", "marks", "want"), [
    (SLURM_DIR / "test_recovery.py", (), (), "slurm-life"),
    (SLURM_DIR / "test_doctor.py", (), (), "slurm"),
    (SLURM_DIR.parent / "sshlab" / "test_lab.py", ("sshlab_factory",), (), "host"),
    (SLURM_DIR.parent / "examples" / "test_x.py", (), ("torch",), "host"),
    (SLURM_DIR.parent / "render" / "test_x.py", (), (), None),
])
def test_each_test_goes_to_its_lane(path: Path, fixtures: tuple[str, ...], marks: tuple[str, ...],
                                    want: str | None) -> None:
    assert lane(_item(path, fixtures, marks)) == want
