"""The SSH lab's fixtures (see fixtures.py); every test that uses a lab is marked ``sshlab``."""

from __future__ import annotations

import pytest

from .fixtures import sshlab_factory, sshlab_skip_reason  # noqa: F401  (fixtures)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "sshlab_factory" in item.fixturenames:  # directly or through another fixture
            item.add_marker(pytest.mark.sshlab)
