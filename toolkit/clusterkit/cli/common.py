"""Options shared by ``render``, ``submit`` and ``plan --render``, and the request they build."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from clusterkit.config import job_options as opts
from clusterkit.job import settings as settings_mod
from clusterkit.vocab import LAUNCHERS as LAUNCHER_NAMES

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from clusterkit.job.request import JobRequest

F = Callable[..., Any]


SITE_ENV = "CLUSTERKIT_SITE"


def _complete_launcher(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    from click.shell_completion import CompletionItem
    return [CompletionItem(n) for n in LAUNCHER_NAMES if n.startswith(incomplete)]


def _complete_site(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Site names on the search path, for shell completion (a path completes as a file)."""
    from click.shell_completion import CompletionItem

    from clusterkit.config.load import list_sites

    if "/" in incomplete:
        return [CompletionItem(incomplete, type="file")]
    return [CompletionItem(e.name) for e in list_sites() if not e.shadowed and e.name.startswith(incomplete)]


def _site_from_env(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A site taken from ``$CLUSTERKIT_SITE`` must name one: a bad value names the variable."""
    from click.core import ParameterSource

    if value is None or param.name is None or ctx.get_parameter_source(param.name) is not ParameterSource.ENVIRONMENT:
        return value
    from clusterkit.config.load import find_site
    from clusterkit.errors import ConfigError, InputError

    try:
        find_site(value)
    except ConfigError as exc:
        why = exc.issues[0].message if exc.issues else str(exc)
        raise InputError(f"{SITE_ENV}={value[:200]!r} (the default site): {why}; set {SITE_ENV} to a site "
                         "of `clusterkit sites list`, unset it, or pass --site") from None
    return value


def site_option_named(dest: str, required: bool = True) -> Callable[[F], F]:
    """``--site SITE``, by default ``$CLUSTERKIT_SITE``; site names complete in the shell."""
    return click.option("--site", dest, required=required, metavar="SITE", envvar=SITE_ENV, show_envvar=True,
                        callback=_site_from_env, shell_complete=_complete_site,
                        help="Site config: a file path, or a name on the site search path (see `sites list`).")


def nodelist_option(nodelist: str | None, old: str | None) -> str | None:
    """``--nodelist`` names hosts; its old spelling ``--nodes`` (a count in submit, render and
    plan) still works here, with a warning, until it goes."""
    from clusterkit.errors import InputError

    if old is None:
        return nodelist
    if nodelist is not None:
        raise InputError("give --nodelist only (--nodes is its old spelling)")
    from clusterkit.cli import output

    output.warn(f"--nodes {old[:200]} is deprecated here: say --nodelist {old[:200]} "
                "(--nodes is a number of nodes in submit, render and plan)")
    return old


def site_option(f: F) -> F:
    return site_option_named("site")(f)


def job_options(f: F) -> F:
    """--site, the request's options, --out, --json, the job setup options and the array's
    (each declared once in :data:`clusterkit.config.job_options.OPTIONS`) + COMMAND."""
    decorators: list[Callable[[F], F]] = [site_option]
    for o in opts.OPTIONS:
        if o.group == "long-run":
            continue
        decorators.append(option(o))
        if o.name == "settings":
            decorators.append(click.option(
                "--out", default=None, metavar="DIR",
                help="Run directory to create (default: ./runs/<job>-<time>; on a Slurm site whose shared storage "
                     "does not hold the current directory, clusterkit-runs/ in your shared home or "
                     "<shared path>/$USER instead)."))
        elif o.name == "debug_nodes":
            decorators.append(click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."))
    decorators.append(click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True))
    for d in reversed(decorators):
        f = d(f)
    return f


def option(o: opts.JobOption) -> Callable[[F], F]:
    """The click option of job option ``o`` (:mod:`clusterkit.config.job_options`)."""
    kw: dict[str, Any] = {"metavar": o.metavar} if o.metavar else {}
    text = o.help
    if o.cli == "count":
        kw["type"] = click.IntRange(min=1)
    elif o.cli == "choice":
        kw["type"] = click.Choice(o.choices)
    elif o.cli == "words":
        kw["multiple"] = True
    elif o.cli == "flag":
        kw["is_flag"] = True
    if o.cli not in ("words", "flag"):
        kw["default"] = None
    if o.name == "launcher":
        kw["shell_complete"] = _complete_launcher
    if o.name == "settings":
        text += ", ".join(settings_mod.valid_keys()) + "."
    return click.option(o.flag, o.param, help=text, **kw)


def job_setup_args(given: dict[str, Any]) -> dict[str, Any]:
    """The job's own options (``job_request``'s ``**job``) among a command's keyword arguments,
    empty ones dropped."""
    return {k: given[k] for k in opts.JOB_ARGS if given.get(k) not in (None, ())}


def build_request(*, stage: str | None, command: Sequence[str], launcher: str | None, nodes: int | None,
                  gpus_per_node: int | None, sets: Sequence[str], job_name: str | None,
                  exclude: str | None, debug: bool, extra_settings: dict[str, Any] | None = None,
                  job: dict[str, Any] | None = None) -> JobRequest:
    """The JobRequest of the parsed options: ``--set`` pairs parsed here, the rest checked where
    the Python API checks it (:func:`clusterkit.api.job_request`; imported lazily for --help)."""
    from clusterkit.api import job_request

    values = dict(extra_settings or {})
    values.update(settings_mod.parse_pairs(sets))
    given = job or {}
    request = job_request(command, stage=stage, launcher=launcher, nodes=nodes, gpus_per_node=gpus_per_node,
                          settings=values, job_name=job_name, exclude=exclude, debug=debug, **job_setup_args(given))
    from clusterkit.cli import INVOKED

    return replace(request, origin=tuple(INVOKED))
