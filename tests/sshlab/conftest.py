"""Every test that uses an SSH lab is marked ``sshlab`` (the fixtures come from fixtures.py,
registered for all test directories in tests/conftest.py)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "sshlab_factory" in item.fixturenames:  # directly or through another fixture
            item.add_marker(pytest.mark.sshlab)
