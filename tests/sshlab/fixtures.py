"""pytest fixtures of the SSH lab, usable from any test directory.

Inside ``tests/sshlab`` they come from this directory's conftest.  Other directories get them
by importing them into their own conftest (``from tests.sshlab.fixtures import
sshlab_factory, sshlab_skip_reason``), or for every directory at once through the root
``tests/conftest.py`` (``pytest_plugins = ["tests.sshlab.fixtures"]``; then drop the import
from ``tests/sshlab/conftest.py`` so the session has one definition).  Labs can also be
started directly with :func:`tests.sshlab.lab.start_lab`.

* ``sshlab_factory`` (session): ``make(nodes: Mapping[str, str], **start_lab_kw) -> SSHLab``.
  ``nodes`` maps host names to profile names (``tests/sshlab/profiles/<name>``) or to
  ``@refused`` / ``@tarpit`` / ``@blackhole``.  Labs are cached by their arguments, so every
  test asking for the same mapping shares one lab; all are stopped when the session ends.
  Skips (with the reason) where the lab cannot run: not root, no sshd.
* ``sshlab_skip_reason``: the skip reason or None, for tests that want to decide themselves.

The returned :class:`~sshlab.lab.SSHLab` has ``hosts``, ``nodes``, ``addresses``,
``ssh_config``, ``known_hosts``, ``identity``, ``netns``, ``port``, ``env()`` (the client
environment: ``CLUSTERKIT_SSH_CONFIG`` set, no ssh-agent), ``run(argv, **kw)`` /
``popen(argv, **kw)`` / ``wrap(argv)`` to run a client inside the lab, ``node_dir(host)`` and
``sshd_logs()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from .lab import SSHLab, lab_unavailable_reason, start_lab

LabFactory = Callable[..., SSHLab]


@pytest.fixture(scope="session")
def sshlab_skip_reason() -> str | None:
    """Why the SSH lab cannot run here (None when it can)."""
    return lab_unavailable_reason()


@pytest.fixture(scope="session")
def sshlab_factory(tmp_path_factory: pytest.TempPathFactory,
                   sshlab_skip_reason: str | None) -> Iterator[LabFactory]:
    """Start labs on demand (shared per argument set); stop them all at the end."""
    if sshlab_skip_reason:
        pytest.skip(sshlab_skip_reason)
    labs: dict[Any, SSHLab] = {}

    def make(nodes: Mapping[str, str], **kw: Any) -> SSHLab:
        key = (tuple(nodes.items()), tuple(sorted(kw.items())))
        lab = labs.get(key)
        if lab is None or lab.stopped:
            lab = labs[key] = start_lab(nodes, tmp_path_factory.mktemp("sshlab"), **kw)
        return lab

    try:
        yield make
    finally:
        for lab in labs.values():
            lab.stop()
