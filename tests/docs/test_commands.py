"""Every ``clusterkit ...`` command the README and docs/*.md show, checked against the real
command line: each parses (click's own parser, with the real commands, options and types; the
command's body is not run), and the ones that need no Slurm, no node and no job record (render,
plan, the site commands, ``submit --dry-run``) run for real on a copy of the example sites, each
in the order its file shows them. A renamed or removed option, a bad value or a wrong command
name in the docs fails here."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest

from tests.conftest import REPO
from tests.docs.markdown import Shown, doc_files, rel, shown_commands

SHOWN = shown_commands()


def parse(argv: tuple[str, ...], env: tuple[tuple[str, str], ...],
          monkeypatch: pytest.MonkeyPatch) -> tuple[click.Command, dict[str, Any]]:
    """The command ``argv`` resolves to and its parsed parameters: the real CLI parses them,
    and the leaf command's ``invoke`` (which would run it) only records what it was given."""
    from clusterkit.cli import cli

    calls: list[tuple[click.Command, dict[str, Any]]] = []

    def record(self: click.Command, ctx: click.Context) -> None:
        calls.append((self, dict(ctx.params)))

    monkeypatch.setattr(click.Command, "invoke", record)   # a Group's own invoke still resolves
    monkeypatch.delenv("CLUSTERKIT_SITE", raising=False)
    for name, value in env:
        monkeypatch.setenv(name, value)
    cli.main(args=list(argv), prog_name="clusterkit", standalone_mode=False)
    assert calls, f"clusterkit {' '.join(argv)}: no command ran"
    command, params = calls[-1]
    assert not isinstance(command, click.Group), f"clusterkit {' '.join(argv)}: names a group, no command"
    return command, params


def test_the_docs_show_commands_and_the_readme_tours_are_among_them() -> None:
    """The extractor finds what the README's tours show, so an empty extraction cannot pass."""
    readme = {s.argv[:2] for s in SHOWN if s.path == REPO / "README.md"}
    assert {("sites", "list"), ("render", "--site"), ("submit", "--site"), ("status", "--all"),
            ("cancel", "42"), ("sites", "init"), ("sites", "drift"), ("preflight", "--site")} <= readme, readme
    local = [s for s in SHOWN if s.env == (("CLUSTERKIT_SITE", "local"),)]
    assert [s.argv[0] for s in local if s.path == REPO / "README.md"] == ["render", "submit", "status", "doctor"]
    assert {rel(s.path) for s in SHOWN} >= {"README.md", "docs/jobs.md", "docs/admin.md", "docs/doctor.md",
                                             "docs/sbatch.md"}


@pytest.mark.parametrize("shown", SHOWN, ids=[s.id for s in SHOWN])
def test_shown_command_parses(shown: Shown, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        _, params = parse(shown.argv, shown.env, monkeypatch)
    except click.UsageError as exc:
        pytest.fail(f"{shown.id}: clusterkit {' '.join(shown.argv)}: {exc.format_message()}")
    if "--" in shown.argv:   # the training command reaches the command whole
        after = list(shown.argv[shown.argv.index("--") + 1:])
        assert [list(v) for v in params.values() if isinstance(v, tuple) and list(v) == after], (shown.id, params)


def test_a_renamed_option_or_command_fails_the_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the check catches: an option that is not (or no longer) there, a bad value, a
    option without its value, a command name that is not one."""
    ok = ("render", "--site", "local", "--nodes", "1", "--", "python", "train.py")
    assert parse(ok, (), monkeypatch)[0].name == "render"
    for argv in (("render", "--site", "local", "--node", "1", "--", "python", "train.py"),
                 ("render", "--site", "local", "--nodes", "four", "--", "python", "train.py"),
                 ("status", "--all", "--limit"),
                 ("sumbit", "--site", "local"),
                 ("sites", "valdate", "x.yaml")):
        with pytest.raises(click.UsageError):
            parse(argv, (), monkeypatch)


def runs_here(argv: tuple[str, ...]) -> bool:
    """Commands that need no Slurm, no node, no job record and no file the docs only name."""
    if argv[0] in ("render", "plan"):
        return True
    if argv[0] == "submit":
        return "--dry-run" in argv
    if argv[0] == "sites" and len(argv) > 1:
        return argv[1] in ("list", "validate", "schema", "show") or (argv[1] == "init" and "--from-example" in argv)
    return False


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Path]:
    """A directory with a copy of the example sites and the examples, as a checkout has them, and
    the training script the docs name (``submit`` checks that its code snapshot holds it)."""
    shutil.copytree(REPO / "site_configs", tmp_path / "site_configs")
    shutil.copytree(REPO / "examples", tmp_path / "examples")   # a copy: a link out of the tree is not snapshotted
    (tmp_path / "train.py").write_text("")
    yield tmp_path


RUNNABLE = {rel(p): [s for s in SHOWN if s.path == p and runs_here(s.argv)] for p in doc_files()}
RUNNABLE = {k: v for k, v in RUNNABLE.items() if v}


def test_some_shown_commands_run_here() -> None:
    assert {"README.md", "docs/admin.md", "docs/jobs.md"} <= set(RUNNABLE), RUNNABLE


@pytest.mark.parametrize("doc", sorted(RUNNABLE))
def test_shown_commands_that_need_no_cluster_run(doc: str, sandbox: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "toolkit"), "CLUSTERKIT_STATE_DIR": str(sandbox / "state")}
    for name in ("CLUSTERKIT_SITE", "CLUSTERKIT_SITES"):
        env.pop(name, None)
    for shown in RUNNABLE[doc]:
        argv: list[str] = []
        for word in shown.argv:   # the shell's glob, where a word has one
            matches = sorted(glob.glob(word, root_dir=sandbox)) if "*" in word else []
            argv.extend(matches or [word])
        p = subprocess.run([sys.executable, "-m", "clusterkit", *argv], cwd=sandbox, capture_output=True, text=True,
                           env={**env, **dict(shown.env)}, timeout=120)
        assert p.returncode == 0 and "Traceback" not in p.stderr, f"{shown.id}: {shown.text}\n{p.stdout}{p.stderr}"
