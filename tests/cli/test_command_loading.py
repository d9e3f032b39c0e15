"""Commands are imported only when run; one that cannot be imported is a clear error, never hidden."""

from __future__ import annotations

import subprocess
import sys
import types

import click
import pytest

from clusterkit import cli
from tests.conftest import REPO, assert_one_line_error


@pytest.fixture
def fake_command(monkeypatch: pytest.MonkeyPatch):
    """Register command ``fake`` served by module ``clusterkit_fake_cmd`` (set up per test)."""
    monkeypatch.setitem(cli.COMMANDS, "fake", ("clusterkit_fake_cmd", "fake", "A command for tests."))
    monkeypatch.delitem(sys.modules, "clusterkit_fake_cmd", raising=False)
    return monkeypatch


def test_missing_dependency_is_a_one_line_error_not_no_such_command(ck, fake_command, tmp_path) -> None:
    (tmp_path / "clusterkit_fake_cmd.py").write_text("import clusterkit_missing_dependency\n")
    fake_command.syspath_prepend(str(tmp_path))
    result = ck("fake", "--help")
    assert_one_line_error(result, 1, "command 'fake' cannot be loaded",
                          "No module named 'clusterkit_missing_dependency'")
    assert "No such command" not in result.err


def test_missing_command_module_is_a_one_line_error(ck, fake_command) -> None:
    result = ck("fake")  # the module clusterkit_fake_cmd does not exist at all
    assert_one_line_error(result, 1, "command 'fake' cannot be loaded", "clusterkit_fake_cmd")
    assert "No such command" not in result.err


def test_module_without_the_command_is_a_one_line_error(ck, fake_command) -> None:
    fake_command.setitem(sys.modules, "clusterkit_fake_cmd", types.ModuleType("clusterkit_fake_cmd"))
    result = ck("fake")
    assert_one_line_error(result, 1, "command 'fake'", "no click command 'fake'")


def test_a_listed_command_loads_on_use(ck, fake_command) -> None:
    mod = types.ModuleType("clusterkit_fake_cmd")

    @click.command()
    def fake() -> None:
        click.echo("fake ran")

    mod.fake = fake  # type: ignore[attr-defined]
    fake_command.setitem(sys.modules, "clusterkit_fake_cmd", mod)
    result = ck("fake")
    assert result.code == 0 and result.out == "fake ran\n"
    assert "fake" in ck("--help").out


def test_unknown_command_is_still_a_usage_error(ck) -> None:
    assert_one_line_error(ck("no-such-command"), 2, "No such command")


def test_help_imports_no_command_module() -> None:
    code = ("import sys; from clusterkit.cli import main\n"
            "try: main(['--help'])\nexcept SystemExit: pass\n"
            "mods = sorted(m for m in sys.modules if m.startswith('clusterkit.cli.') or m.split('.')[0] in "
            "('pydantic', 'jinja2', 'rich', 'yaml', 'submitit', 'paramiko'))\n"
            "print(','.join(mods), file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0 and p.stderr.strip() == "", p.stderr
