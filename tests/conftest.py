"""Fixtures shared by every test directory: run clusterkit through its real CLI entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# the SSH lab fixtures (sshlab_factory, ...) for every test directory
pytest_plugins = ["tests.sshlab.fixtures"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--regen-golden", action="store_true", default=False,
                     help="rewrite tests/golden and hostfiles/ from the current renderer, then review the diff")


@dataclass
class CLIResult:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.err.strip().splitlines()


@pytest.fixture
def ck(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Run ``clusterkit ARGS`` in-process through ``clusterkit.cli.main`` (same path as the console script)."""
    from clusterkit.cli import main

    def run(*args: str, cwd: Path | str = REPO) -> CLIResult:
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        cap = capsys.readouterr()
        return CLIResult(code, cap.out, cap.err)

    return run


@pytest.fixture
def ck_proc():
    """Run ``python -m clusterkit ARGS`` as a separate process (for tracebacks, signals, start-up)."""

    def run(*args: str, cwd: Path | str = REPO, env: dict[str, str] | None = None, timeout: float = 120,
            input: str | None = None) -> CLIResult:
        full_env = dict(os.environ, **(env or {}))
        p = subprocess.run([sys.executable, "-m", "clusterkit", *args], cwd=cwd, env=full_env, text=True,
                           capture_output=True, timeout=timeout, input=input)
        return CLIResult(p.returncode, p.stdout, p.stderr)

    return run


def shared_site(directory: Path, site: str, shared: Path) -> Path:
    """The example site ``site`` with ``shared`` declared shared storage, as a site file in
    ``directory``.  Multi-node run directories must be on a site's shared storage; in tests a
    temporary directory stands in for the cluster's Lustre or NFS."""
    import yaml

    from clusterkit.config.load import load_site

    parent = load_site(site)
    storage = [s.model_dump(exclude_defaults=True) for s in parent.storage]
    storage.append({"path": str(shared), "type": "local", "shared": True})
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{site}.yaml"
    path.write_text(yaml.safe_dump({"extends": str(REPO / "site_configs" / f"{site}.yaml"), "storage": storage}))
    return path


def assert_one_line_error(result: CLIResult, code: int, *needles: str) -> None:
    """A user error: the documented exit code, 'clusterkit: error:' lines, no traceback."""
    assert result.code == code, (result.code, result.out, result.err)
    assert "Traceback" not in result.err
    lines = result.err.strip().splitlines()
    errors = [line for line in lines if line.startswith("clusterkit: error:")]
    assert errors, result.err
    assert all(line.startswith(("clusterkit: error:", "clusterkit: warning:")) for line in lines), result.err
    for needle in needles:
        assert needle in result.err, (needle, result.err)
