"""What every command does alike: exit codes on every --help page, one exit code for "no job record"."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from clusterkit.cli import COMMANDS, cli, load_command
from tests.conftest import assert_one_line_error


def _help_pages() -> list[tuple[str, ...]]:
    pages: list[tuple[str, ...]] = [()]
    for name, spec in sorted(COMMANDS.items()):
        command = load_command(name, *spec[:2])
        pages.append((name,))
        if isinstance(command, click.Group):
            pages.extend((name, sub) for sub in sorted(command.commands))
    return pages


def test_every_command_is_covered() -> None:
    pages = _help_pages()
    assert len(pages) > len(COMMANDS) + 1  # the top page, each command, the sites subcommands
    assert ("sites", "validate") in pages and ("doctor",) in pages


@pytest.mark.parametrize("words", _help_pages(), ids=lambda w: " ".join(w) or "clusterkit")
def test_every_help_page_lists_the_exit_codes(ck, words: tuple[str, ...]) -> None:
    res = ck(*words, "--help")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Exit codes:")
    codes = {line.split()[0] for line in lines[start + 1:] if line.strip()[:1].isdigit()}
    assert {"0", "2"} <= codes, res.out


def test_the_shared_epilog_keeps_a_command_s_own() -> None:
    assert cli.epilog is not None and "Exit codes:" in cli.epilog
    doctor = load_command("doctor", *COMMANDS["doctor"][:2])
    assert doctor.epilog is not None and doctor.epilog.count("Exit codes:") == 1
    assert "a failure was diagnosed" in doctor.epilog  # its own, not the shared one


@pytest.mark.parametrize("command", ["status", "logs", "cancel", "doctor"])
def test_no_job_record_exits_2_in_every_command(ck, command: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path))
    assert_one_line_error(ck(command, "424242"), 2, "no job record for '424242'")
    assert_one_line_error(ck(command, "site:"), 2, "'site:': expected a job id or SITE:JOB_ID")


@pytest.mark.parametrize(("args", "needle"), [
    (("sumbit",), "No such command 'sumbit'. Did you mean 'submit'?"),
    (("sites", "valdate"), "No such command 'valdate'. Did you mean 'validate'?"),
    (("render", "--site", "local", "--set", "zero_stag=2", "--", "python", "t.py"),
     "--set zero_stag: unknown setting; did you mean zero_stage? valid settings: account,"),
    (("render", "--site", "local", "--set", "micro-bach=2", "--", "python", "t.py"),
     "--set micro_bach: unknown setting; did you mean micro_batch?"),
])
def test_a_mistyped_command_or_setting_gets_the_closest_name(ck, tmp_path: Path, args: tuple[str, ...],
                                                             needle: str) -> None:
    assert_one_line_error(ck(*args, cwd=tmp_path), 2, needle)


@pytest.mark.parametrize("args", [("zzzz",), ("render", "--site", "local", "--set", "qqqqqq=1", "--", "t")])
def test_nothing_close_suggests_nothing(ck, tmp_path: Path, args: tuple[str, ...]) -> None:
    res = ck(*args, cwd=tmp_path)
    assert_one_line_error(res, 2)
    assert "did you mean" not in res.err.lower()


def test_render_json_and_submit_dry_run_json_have_the_same_keys(ck, tmp_path: Path) -> None:
    import json

    job = ("--site", "local", "--json", "--", "python", "train.py")
    rendered = ck("render", "--out", str(tmp_path / "r"), *job, cwd=tmp_path)
    dry = ck("submit", "--dry-run", "--no-snapshot", "--out", str(tmp_path / "d"), *job, cwd=tmp_path)
    assert rendered.code == 0 and dry.code == 0, rendered.err + dry.err
    r, d = json.loads(rendered.out), json.loads(dry.out)
    assert sorted(r) == sorted(d) and {"run_dir", "script", "job_sbatch", "scheduler", "launcher"} <= set(r)
    assert (r["dry_run"], d["dry_run"]) == (False, True)
    assert r["job_sbatch"] == Path(r["script"]).read_text() and d["job_sbatch"] == Path(d["script"]).read_text()
    assert {k: v for k, v in r.items() if k not in ("run_dir", "script", "job_sbatch", "dry_run")} == \
        {k: v for k, v in d.items() if k not in ("run_dir", "script", "job_sbatch", "dry_run")}


@pytest.mark.parametrize("words", _help_pages()[1:], ids=lambda w: " ".join(w))
def test_each_command_lists_its_own_exit_codes_within_80_columns(ck, words: tuple[str, ...]) -> None:
    """A command's page lists the codes it returns (not the generic list of the top page), each
    line within 80 columns."""
    res = ck(*words, "--help")
    lines = res.out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Exit codes:")
    block = lines[start:]
    assert all(len(line) <= 80 for line in block), block
    assert "preflight could not reach some nodes; the Slurm controller could not be" not in res.out or \
        words == ("preflight",), res.out


@pytest.mark.parametrize(("args", "code"), [
    (("render", "--site", "nosuchsite", "--", "python", "t.py"), 2),
    (("sites", "show", "nosuchsite"), 2),
    (("sites", "list", "--bogus"), 2),
    (("status", "--bogus"), 2),
])
def test_the_listed_codes_are_the_ones_returned(ck, tmp_path: Path, args: tuple[str, ...], code: int) -> None:
    res = ck(*args, cwd=tmp_path)
    assert res.code == code, res
    page = ck(*args[:2] if args[0] == "sites" else args[:1], "--help").out
    assert re.search(rf"^\s+{code}\s+\S", page, re.M), page


def test_plan_render_json_carries_render_json_s_document(ck, tmp_path: Path) -> None:
    import json

    planned = ck("plan", "--site", "local", "--model-params", "10M", "--render", "--json", "--out", str(tmp_path / "p"),
                 "--", "python", "train.py", cwd=tmp_path)
    rendered = ck("render", "--site", "local", "--json", "--out", str(tmp_path / "r"), "--", "python", "train.py",
                  cwd=tmp_path)
    assert planned.code == 0 and rendered.code == 0, planned.err + rendered.err
    inner = json.loads(planned.out)["rendered"]
    assert sorted(inner) == sorted(set(json.loads(rendered.out)) - {"schema_version"}) and inner["dry_run"] is False
    assert inner["job_sbatch"] == (tmp_path / "p" / "job.sbatch").read_text()
