"""``$CLUSTERKIT_SITE`` is the default site of every command taking --site, and shell completion
offers the site names."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, assert_one_line_error

PLAN = ("plan", "--model-params", "7B", "--json")


@pytest.mark.parametrize("args", [
    PLAN,
    ("render", "--json", "--", "python", "train.py"),
    ("submit", "--dry-run", "--no-snapshot", "--json", "--", "python", "train.py"),
    ("preflight", "--json"),
])
def test_every_command_taking_site_takes_it_from_the_variable(ck, tmp_path: Path, args: tuple[str, ...]) -> None:
    env = {"CLUSTERKIT_SITE": "local", "CLUSTERKIT_STATE_DIR": str(tmp_path / "state")}
    extra = ("--out", str(tmp_path / "run")) if args[0] in ("render", "submit") else ()
    argv = (*args[:1], *extra, *args[1:])
    res = ck(*argv, cwd=REPO, env=env)
    assert res.code in (0, 1), res  # preflight finds no GPU here: 1, a verdict, not a usage error
    assert '"local"' in res.out, res
    missing = ck(*argv, cwd=REPO, env={**env, "CLUSTERKIT_SITE": None})
    assert missing.code == 2 and "--site" in missing.err, missing


def test_the_site_option_wins_over_the_variable(ck) -> None:
    res = ck("plan", "--model-params", "7B", "--site", "ib-h100", cwd=REPO, env={"CLUSTERKIT_SITE": "local"})
    assert res.code == 0 and res.out.startswith("site ib-h100: 64 nodes x 8 GPUs"), res


@pytest.mark.parametrize("value", ["no-such-site", "/nowhere/site.yaml"])
def test_a_bad_default_site_names_the_variable(ck, value: str) -> None:
    res = ck(*PLAN, cwd=REPO, env={"CLUSTERKIT_SITE": value})
    assert_one_line_error(res, 2, f"CLUSTERKIT_SITE={value!r} (the default site)", "pass --site")
    explicit = ck(*PLAN, "--site", value, cwd=REPO, env={"CLUSTERKIT_SITE": None})
    assert explicit.code == 2 and "CLUSTERKIT_SITE" not in explicit.err, explicit


def test_help_names_the_variable(ck) -> None:
    for command in ("submit", "render", "plan", "preflight"):
        assert "CLUSTERKIT_SITE" in ck(command, "--help").out, command


def _complete(ck, words: str) -> list[str]:  # type: ignore[no-untyped-def]
    res = ck.proc(cwd=REPO, env={"_CLUSTERKIT_COMPLETE": "bash_complete", "COMP_WORDS": words,
                                 "COMP_CWORD": str(len(words.split(" ")) - 1)})
    assert res.code == 0, res
    return res.out.splitlines()


def test_shell_completion_offers_site_names(ck) -> None:
    # what `eval "$(_CLUSTERKIT_COMPLETE=bash_source clusterkit)"` has bash ask for
    assert _complete(ck, "clusterkit submit --site ") == [
        "plain,efa-p5", "plain,eth-nfs", "plain,ib-h100", "plain,local", "plain,roce-a100", "plain,testbed"]
    assert _complete(ck, "clusterkit plan --site ro") == ["plain,roce-a100"]
    assert _complete(ck, "clusterkit preflight --site ./site_configs/") == ["file,./site_configs/"]
    assert "plain,submit" in _complete(ck, "clusterkit sub")
    script = ck.proc(cwd=REPO, env={"_CLUSTERKIT_COMPLETE": "bash_source"})
    assert script.code == 0 and "complete -o nosort -F _clusterkit_completion clusterkit" in script.out, script
