"""Options shared by ``render``, ``submit`` and ``plan --render``, and the request they build."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from clusterkit.job import settings as settings_mod
from clusterkit.vocab import LAUNCHERS as LAUNCHER_NAMES
from clusterkit.vocab import STAGE_NAMES

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
    """--site --stage --launcher --nodes --gpus-per-node --set --out --job-name --exclude --debug --json, the
    job setup options (:func:`job_setup_options`) + COMMAND."""
    decorators: list[Callable[[F], F]] = [
        site_option,
        click.option("--stage", type=click.Choice(STAGE_NAMES), default=None,
                     help="Deployment stage: single-node (1), multi-node (2-8), large-cluster (9+ nodes) "
                          "(default: the one that holds --nodes, else single-node)."),
        click.option("--launcher", default=None, metavar="NAME", shell_complete=_complete_launcher,
                     help=f"Launcher: {', '.join(LAUNCHER_NAMES)}, or one of the site's own (its launchers: key) "
                          "(default: the site's choice for the stage, else the stage's)."),
        click.option("--nodes", type=click.IntRange(min=1), default=None,
                     help="Number of nodes (default: the stage's)."),
        click.option("--gpus-per-node", type=click.IntRange(min=1), default=None,
                     help="GPUs (processes) per node (default: all of the site's)."),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                     help="Job setting, repeatable: " + ", ".join(settings_mod.valid_keys()) + "."),
        click.option("--out", default=None, metavar="DIR",
                     help="Run directory to create (default: ./runs/<job>-<time>; on a Slurm site whose shared storage "
                          "does not hold the current directory, clusterkit-runs/ in your shared home or "
                          "<shared path>/$USER instead)."),
        click.option("--job-name", default=None, help="Slurm job name (default: ck-<script>)."),
        click.option("--exclude", default=None, metavar="NODESET",
                     help="Nodes to keep out of the job, e.g. gpu[003,017]."),
        click.option("--debug", is_flag=True,
                     help="NCCL debug logging (INFO, INIT/NET subsystems, one file per process)."),
        click.option("--debug-nodes", "debug_nodes", default=None, metavar="NODESET",
                     help="NCCL debug logging on these nodes only, into the run's logs, e.g. gpu[003,017] "
                          "(implies --debug; above the site's logs.debug_max_nodes --debug alone keeps each "
                          "node's files on its own disk)."),
        click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
        *job_setup_options(),
        *array_options(),
        click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True),
    ]
    for d in reversed(decorators):
        f = d(f)
    return f


def job_setup_options() -> list[Callable[[F], F]]:
    """The job's own additions, each repeatable (added after the site's ``job:`` section); the
    command receives them as keyword arguments named as :func:`clusterkit.api.job_request`'s."""
    return [
        click.option("--env", "env", multiple=True, metavar="KEY=VALUE",
                     help="Environment for every rank on every node, repeatable; the value is literal except "
                          "${SLURM_*} and ${CK_*}, which each node expands for itself."),
        click.option("--env-file", "env_file", multiple=True, metavar="PATH",
                     help="KEY=VALUE lines and # comments (no shell), repeatable; --env wins over it."),
        click.option("--setup", "setup", multiple=True, metavar="CMD",
                     help="Shell command in the batch shell after modules and environment, before the launcher; "
                          "repeatable, run in order."),
        click.option("--node-setup", "node_setup", multiple=True, metavar="CMD",
                     help="Shell command run once on every node (one task per node) before the launcher; repeatable."),
        click.option("--teardown", "teardown", multiple=True, metavar="CMD",
                     help="Shell command on the batch host once the training has ended for good, whether it "
                          "succeeded or not ($CK_TRAINING_STATUS); repeatable, its exit recorded apart."),
        click.option("--venv", "venv", default=None, metavar="PATH",
                     help="Python virtual environment to activate on every node."),
        click.option("--conda", "conda", default=None, metavar="ENV",
                     help="Conda environment (name or prefix) to activate on every node."),
        click.option("--module", "modules", multiple=True, metavar="NAME",
                     help="Environment module to load after the site's, repeatable; `purge` unloads every "
                          "module loaded before it (module purge)."),
        click.option("--srun-arg", "srun_args", multiple=True, metavar="ARG",
                     help="Argument added to every srun step, repeatable (e.g. --srun-arg=--label)."),
        click.option("--launcher-arg", "launcher_args", multiple=True, metavar="ARG",
                     help="Argument added to the launcher's own argv, repeatable."),
        click.option("--sbatch", "sbatch", multiple=True, metavar="KEY[=VALUE]",
                     help="Per-job Slurm option, repeatable (e.g. constraint=a100); wins over the site's."),
        click.option("--snapshot/--no-snapshot", "snapshot", default=None,
                     help="Run the job in a snapshot of the code taken now (git's files of the working tree; "
                          "default: the site's code.snapshot, on unless the site turns it off), or in the live "
                          "tree as it is when the job starts."),
        click.option("--code", "code", default=None, metavar="DIR",
                     help="Snapshot every file under DIR rather than the working tree (git's files)."),
    ]


def array_options() -> list[Callable[[F], F]]:
    """``--array`` and ``--sweep``: one sbatch, a task per index (clusterkit.job.array)."""
    return [
        click.option("--array", "array", default=None, metavar="SPEC",
                     help="Job array in Slurm's syntax (0-15, 1,3,5, 0-30:10; %N: at most N tasks at once): "
                          "one sbatch, one task per index, each with its own folder, logs, port and checkpoints."),
        click.option("--sweep", "sweep", multiple=True, metavar="KEY=V1,V2,...",
                     help="Sweep, repeatable: the product of the values is the array; each task gets "
                          "CK_SWEEP_<KEY> and {KEY} in the command replaced by its value (with --array %N: "
                          "at most N at once)."),
    ]


def job_setup_args(given: dict[str, Any]) -> dict[str, Any]:
    """The job setup options among a command's keyword arguments, empty ones dropped."""
    names = ("env", "env_file", "setup", "node_setup", "teardown", "venv", "conda", "modules", "srun_args",
             "launcher_args", "sbatch", "run_name", "snapshot", "code", "debug_nodes")
    return {k: given[k] for k in names if given.get(k) not in (None, ())}


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
                          settings=values, job_name=job_name, exclude=exclude, debug=debug,
                          array=given.get("array"), sweep=given.get("sweep") or None, **job_setup_args(given))
    from clusterkit.cli import INVOKED

    return replace(request, origin=tuple(INVOKED))
