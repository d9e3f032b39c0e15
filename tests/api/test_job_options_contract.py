"""The job options are declared once (clusterkit.config.job_options.OPTIONS); the API's typed
signatures are written out for type checkers, so these tests hold them to the declaration: a new
option, a renamed one, another default or annotation in one place and not the other fails here."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import click
import pytest

from clusterkit.api import Site, job_request
from clusterkit.api.site import JobArgs
from clusterkit.config import job_options as opts
from clusterkit.config.jobs import STAGE_OWN, JobSection, StageOverride
from clusterkit.config.key_docs import KEY_DOCS
from clusterkit.config.load import json_schema
from clusterkit.job.request import JobSetup
from clusterkit.job.settings import Settings


def _norm(annotation: Any) -> str:
    text = getattr(annotation, "__forward_arg__", annotation)   # TypedDict keeps a ForwardRef
    assert isinstance(text, str), f"annotation {annotation!r} not written as text"
    return " ".join(text.split())


def _params(fn: Any) -> dict[str, inspect.Parameter]:
    return {n: p for n, p in inspect.signature(fn).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}


def test_job_request_takes_every_option_with_its_declared_type_and_default() -> None:
    params = _params(job_request)
    assert set(params) == set(opts.BY_NAME)
    for o in opts.OPTIONS:
        p = params[o.name]
        assert (_norm(p.annotation), p.default) == (o.api_type, o.api_default), o.name


def test_job_args_is_the_options_that_are_not_the_requests_own() -> None:
    hints = JobArgs.__annotations__
    assert set(hints) == set(opts.JOB_ARGS)
    for name in opts.JOB_ARGS:
        assert _norm(hints[name]) == opts.BY_NAME[name].api_type, name


@pytest.mark.parametrize("method", [Site.plan, Site.submit])
def test_site_plan_and_submit_take_the_request_options_then_the_job_args(method: Any) -> None:
    params = inspect.signature(method).parameters
    own = [o for o in opts.OPTIONS if o.group == "request"]
    for o in own:
        p = params[o.name]
        assert (_norm(p.annotation), p.default) == (o.api_type, o.api_default), o.name
    job = params["job"]
    assert job.kind is inspect.Parameter.VAR_KEYWORD and _norm(job.annotation) == "Unpack[JobArgs]"


def test_the_site_job_section_and_the_merged_setup_have_the_declared_keys() -> None:
    assert list(JobSection.model_fields) == [o.name for o in opts.SITE_JOB]
    assert {f.name for f in dataclasses.fields(JobSetup)} == {o.name for o in opts.SITE_JOB} | {"sbatch"}


def test_a_stage_has_the_declared_options_then_its_own_keys_in_their_places() -> None:
    places = {**{o.name: o.stage.rank for o in opts.STAGE if o.stage is not None},
              **{name: rank for name, (rank, _, _) in STAGE_OWN.items()}}
    assert list(StageOverride.model_fields) == sorted(places, key=places.__getitem__)
    assert not set(STAGE_OWN) & set(opts.BY_NAME)   # an option a stage sets is declared once, in the table
    for o in opts.STAGE:   # the stage's value is the job option's, as the API takes it
        assert str(StageOverride.model_fields[o.name].annotation) == o.api_type, o.name


def test_every_stage_key_is_described() -> None:
    described = json_schema()["$defs"]["StageOverride"]["properties"]
    assert {k for k, prop in described.items() if not prop.get("description")} == set()
    assert {o.name for o in opts.STAGE} <= {k.removeprefix("StageOverride.") for k in KEY_DOCS}


def test_a_stages_settings_take_what_set_takes() -> None:
    """A stage's ``--set`` keys are typed as Settings types them, but spares (a share of the nodes too)."""
    for name in set(STAGE_OWN) - {"job", "spares"}:
        mine, theirs = StageOverride.model_fields[name], Settings.model_fields[name]
        assert (mine.annotation, mine.metadata, mine.default) == (theirs.annotation, theirs.metadata, None), name
    assert set(STAGE_OWN) - {"job"} <= set(Settings.model_fields)   # each a --set key as well


def test_the_cli_options_of_render_and_submit_are_the_declared_ones() -> None:
    from clusterkit.cli.render import render
    from clusterkit.cli.submit import submit

    for command, groups in ((render, {"request", "setup", "array"}),
                            (submit, {"request", "setup", "array", "long-run"})):
        by_name = {p.name: p for p in command.params if isinstance(p, click.Option)}
        for o in opts.OPTIONS:
            if o.group not in groups:
                assert o.param not in by_name, (command.name, o.name)
                continue
            p = by_name[o.param]
            assert "/".join([*p.opts, *p.secondary_opts]) == o.flag, o.name
            assert p.multiple == (o.cli == "words") and p.is_flag == (o.cli in ("flag", "switch")), o.name


def test_a_new_option_without_its_api_argument_fails_the_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = opts.JobOption("gpus", "--gpus", "count", help="GPUs in all.", api_type="int | None")
    monkeypatch.setattr(opts, "OPTIONS", (*opts.OPTIONS, extra))
    monkeypatch.setattr(opts, "BY_NAME", {**opts.BY_NAME, "gpus": extra})
    with pytest.raises(AssertionError):
        test_job_request_takes_every_option_with_its_declared_type_and_default()
