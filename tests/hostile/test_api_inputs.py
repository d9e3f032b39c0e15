"""The Python API given what a caller should not give it: a wrong type for any argument, text
that is not UTF-8 (a ``surrogateescape`` string from a non-UTF-8 byte), a NUL in a command word.
Each is clusterkit's own error naming the field, never a TypeError, AttributeError or
UnicodeEncodeError from deep inside, and nothing is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import clusterkit.api as api
from clusterkit.api import Job, Site
from clusterkit.errors import ClusterkitError, InputError

BAD_REQUEST = {
    "job_name": [5], "settings": [1], "exclude": 5, "env": 5, "env_file": 5, "sbatch": 5, "sweep": 5,
    "modules": 5, "setup": 5, "node_setup": 5, "srun_args": 5, "launcher_args": 5, "debug": "yes",
}
NOT_UTF8 = {
    "job_name": "a\udcffb", "env": {"A": "\udcff"}, "settings": {"run_name": "\udcff"}, "env_file": ["/tmp/\udcff"],
    "sbatch": {"comment": "\udcff"}, "srun_args": ["--comment=\udcff"], "setup": ["echo \udcff"],
    "exclude": "n\udcff", "run_name": "r\udcff", "venv": "/v\udcff",
}


@pytest.fixture(scope="module")
def site() -> Site:
    return Site.load("testbed")


@pytest.mark.parametrize("field", sorted(BAD_REQUEST))
def test_a_wrong_type_is_an_input_error_naming_its_field(site: Site, field: str) -> None:
    with pytest.raises(InputError) as err:
        site.plan(["python", "t.py"], **{field: BAD_REQUEST[field]})
    assert str(err.value).startswith(field), str(err.value)


@pytest.mark.parametrize("field", sorted(NOT_UTF8))
def test_text_that_is_not_utf8_is_an_input_error(site: Site, field: str, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not valid UTF-8"):
        site.plan(["python", "t.py"], **{field: NOT_UTF8[field]}).render(tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", [["python", "t\0.py"], ["python", "\udcff"], ["py\udc80thon"]])
def test_a_command_word_with_a_nul_or_not_utf8_never_reaches_the_script(site: Site, command: list[str],
                                                                        tmp_path: Path) -> None:
    with pytest.raises(InputError, match="command"):
        site.plan(command).render(tmp_path / "run")
    assert not (tmp_path / "run").exists()


CALLS: dict[str, Any] = {
    "Site.load": lambda site: Site.load(5),                        # type: ignore[arg-type]
    "Site.load-None": lambda site: Site.load(None),                # type: ignore[arg-type]
    "Site.load_file": lambda site: Site.load_file(5),              # type: ignore[arg-type]
    "Job.find": lambda site: Job.find(5),                          # type: ignore[arg-type]
    "Plan.render": lambda site: site.plan(["p"]).render(5),        # type: ignore[arg-type]
    "Plan.submit_chain": lambda site: site.plan(["p"]).submit_chain("3"),
    "Plan.submit-after": lambda site: site.plan(["p"]).submit(after=5),
    "Site.preflight": lambda site: site.preflight(nodes=5),        # type: ignore[arg-type]
    "Site.preflight-list": lambda site: site.preflight(nodes=[5]),  # type: ignore[list-item]
    "Site.size": lambda site: site.size(5),                        # type: ignore[arg-type]
    "Site.render_sized": lambda site: site.render_sized(5, ["p"]),  # type: ignore[arg-type]
    "drift": lambda site: api.drift(5),                            # type: ignore[arg-type]
    "diagnose_logs": lambda site: api.diagnose_logs(5),            # type: ignore[arg-type]
    # round three's own: a command that is no list of words, a job reference or a site of the
    # wrong type, a path with a NUL
    "Site.plan-int": lambda site: site.plan(5),                    # type: ignore[arg-type]
    "Site.plan-list-of-ints": lambda site: site.plan(["python", 5]),  # type: ignore[list-item]
    "Site.submit-int": lambda site: site.submit(5),                # type: ignore[arg-type]
    "doctor_job": lambda site: api.doctor_job(5),                  # type: ignore[arg-type]
    "doctor_job-None": lambda site: api.doctor_job(None),          # type: ignore[arg-type]
    "node_history": lambda site: api.node_history("testbed"),      # type: ignore[arg-type]
    "Site.load_file-nul": lambda site: Site.load_file("x\0y.yaml"),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_an_api_call_given_a_wrong_type_raises_clusterkits_error(site: Site, name: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ClusterkitError):
        CALLS[name](site)


@pytest.mark.parametrize("argv", [
    ["render", "--site", "testbed", "--out", "{TMP}/run", "--job-name", "a\udcffb", "--", "python", "t.py"],
    ["render", "--site", "testbed", "--out", "{TMP}/run", "--", "python", "\udcff"],
    ["submit", "--dry-run", "--site", "testbed", "--out", "{TMP}/run", "--env", "A=\udcff", "--", "python", "t.py"],
    ["render", "--site", "testbed", "--out", "{TMP}/r\udcffun", "--", "python", "t.py"],
    ["status", "\udcff"],
], ids=["job-name", "command", "env", "out", "status"])
def test_a_non_utf8_argument_is_a_one_line_usage_error(ck, tmp_path: Path, argv: list[str]) -> None:
    from tests.conftest import assert_one_line_error

    result = ck(*[a.replace("{TMP}", str(tmp_path)) for a in argv], cwd=tmp_path)
    assert_one_line_error(result, 2, "is not valid UTF-8 text")
    assert list(tmp_path.iterdir()) == []
