"""The ``clusterkit`` command line.

Commands live in their own modules and are imported only when run, so ``clusterkit --help``
imports neither paramiko nor submitit.  Every command parses its options, calls one core
function and renders its result; domain errors become a one-line message and an exit code
here, in one place (:func:`main`).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from clusterkit._version import __version__
from clusterkit.errors import ClusterkitError, ExitCode

EXIT_CODES_HELP = """\b
Exit codes:
  0  ok
  1  runtime failure (job refused or failed, preflight found bad nodes)
  2  usage or config error (bad option, invalid site config, impossible plan,
     no job record for the JOB given)
  3  preflight could not reach some nodes; the Slurm controller could not be
     reached (status still shows every job, Slurm ones with their last known
     state); the site's login node could not be reached
"""

_NO_RECORD = """\
  1  a job record could not be read (e.g. written by a newer clusterkit)
  2  usage error (bad option), or no job record for the JOB given
"""

# The exit codes of each command's --help, by command path, where the command gives none of
# its own (doctor, preflight, sites init and sites drift do): each lists the codes it returns.
COMMAND_EXIT_CODES: dict[str, str] = {
    "render": """\
  0  rendered
  2  usage or config error (bad option, invalid site config, impossible plan,
     unusable run directory)
""",
    "plan": """\
  0  planned (and rendered, with --render)
  2  usage or config error (bad option, invalid site config, impossible
     request; with --render: nothing to render, unusable run directory)
""",
    "submit": """\
  0  submitted; with --wait or --follow: the job completed
  1  preflight found bad nodes, or the scheduler refused the job
  2  usage or config error (bad option, invalid site config, impossible plan,
     unusable run directory)
  3  the Slurm controller could not be reached, or preflight could not reach
     some nodes, or the site's login node could not be reached
  N  with --wait or --follow: the job's own exit status (128+N: killed by
     signal N)
""",
    "status": "  0  ok\n" + _NO_RECORD + """\
  3  the Slurm controller could not be reached (Slurm jobs shown with their
     last known state, marked stale), or the login node of a job submitted
     through one
""",
    "logs": "  0  ok\n" + _NO_RECORD.replace("for the JOB given", "for the JOB given, or none yet")
            + "  3  the login node of a job submitted through one could not be reached\n",
    "cancel": """\
  0  cancelled, or already ended
  1  a job record could not be read, or scancel failed
  2  usage error (bad option), or no job record for a JOB given (then none
     is cancelled)
  3  the Slurm controller could not be reached, or the login node of a job
     submitted through one
""",
    "sites": """\
  0  ok
  2  usage or config error (bad option, unknown or invalid site)
""",
    "nodes": """\
  0  ok (a history file that cannot be read is a warning, and shows nothing)
  2  usage or config error (bad option, unknown or invalid site, an --html
     FILE that cannot be written)
""",
    "sites list": """\
  0  ok (a site that does not validate is listed as INVALID)
  2  usage error (bad option)
""",
    "sites show": """\
  0  ok
  2  usage or config error (bad option, unknown or invalid site)
""",
    "sites validate": """\
  0  every file is valid
  2  usage error, or some file is invalid (one line per problem:
     file:line: key)
""",
    "sites schema": """\
  0  ok
  2  usage error (bad option)
""",
}

# name -> (module, attribute, one-line help shown by `clusterkit --help` without importing)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "sites": ("clusterkit.cli.sites", "sites", "Site files: list, show, validate, init (write one), drift, schema."),
    "render": ("clusterkit.cli.render", "render", "Render the job script, hostfiles and configs into a run directory."),
    "submit": ("clusterkit.cli.submit", "submit", "Render, preflight and submit a job (Slurm or the local site)."),
    "status": ("clusterkit.cli.jobs", "status", "Show your latest job, or one job; --all: your recent jobs."),
    "logs": ("clusterkit.cli.jobs", "logs", "Show (or follow) a job's logs, per node and rank."),
    "cancel": ("clusterkit.cli.cancel", "cancel", "Cancel jobs (one or several)."),
    "preflight": ("clusterkit.cli.preflight", "preflight", "Check GPUs, drivers, IB links and mounts on the nodes."),
    "plan": ("clusterkit.cli.plan", "plan", "Choose framework, ZeRO stage and node count from model size."),
    "doctor": ("clusterkit.cli.doctor", "doctor", "Find why a job died (by default your latest): cause, node, rank."),
    "nodes": ("clusterkit.cli.nodes", "nodes", "Nodes that failed in your jobs: how often, how, in which jobs."),
    "choose-nodes": ("clusterkit.cli.choose", "choose_nodes",
                     "Inside a job: choose its nodes from its own preflight report (the job script runs it)."),
}


class CommandLoadError(ClusterkitError):
    """A listed command whose module cannot be imported: a broken install, never "no such command"."""

    exit_code = ExitCode.FAILURE


def load_command(name: str, module: str, attr: str) -> click.Command:
    """Import one command's module (and only it) and return its click command."""
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:  # ModuleNotFoundError included: a missing dependency or module
        raise CommandLoadError(f"command '{name}' cannot be loaded: {exc} "
                               f"(a broken install: reinstall clusterkit with its dependencies)") from exc
    command = getattr(mod, attr, None)
    if not isinstance(command, click.Command):
        raise CommandLoadError(f"command '{name}': {module} has no click command {attr!r}")
    with_exit_codes(command, name)
    return command


def with_exit_codes(command: click.Command, path: str) -> None:
    """Give ``command`` (``path``: its words after ``clusterkit``) and its subcommands their
    exit codes (:data:`COMMAND_EXIT_CODES`, else the shared list) where they list none of
    their own: every ``--help`` page lists its exit codes."""
    if "Exit codes:" not in (command.epilog or ""):
        codes = COMMAND_EXIT_CODES.get(path)
        text = "\b\nExit codes:\n" + codes if codes else EXIT_CODES_HELP
        command.epilog = text + ("\n" + command.epilog if command.epilog else "")
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            with_exit_codes(sub, f"{path} {name}")


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = COMMANDS.get(cmd_name)
        if spec is None:
            return None
        return load_command(cmd_name, *spec[:2])

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and name not in COMMANDS and not name.startswith("-") and not ctx.resilient_parsing:
            # the commands are not imported yet, so click has none to suggest from: ours
            raise click.exceptions.NoSuchCommand(name, possibilities=list(COMMANDS), ctx=ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="clusterkit")
def cli() -> None:
    """clusterkit: plan, render, preflight and submit distributed training jobs.

    A site config describes a cluster; a stage (single-node, multi-node, large-cluster)
    says how big the job is; clusterkit turns both into an sbatch script, hostfiles, NCCL
    environment and launcher configs, checks the nodes, and submits.
    """


# request fields the command line does not name after an option of the same name
_FIELD_WORDS = {"command": "the training command after '--'", "modules": "--module", "srun_args": "--srun-arg",
                "launcher_args": "--launcher-arg"}


def option_name(field: str, value: str | None) -> str:
    """A request field as the command line names it: ``settings.zero_stage`` is ``--set
    zero_stage``, ``gpus_per_node`` is ``--gpus-per-node``; the value follows as typed."""
    if field.startswith("settings."):
        return f"--set {field.removeprefix('settings.')}" + ("" if value is None else f"={value}")
    name = _FIELD_WORDS.get(field, "--" + field.replace("_", "-"))
    return name + ("" if value is None else f" {value}")


def report_error(err: ClusterkitError) -> None:
    """The error as ``clusterkit: error:`` lines, its fields named as the command line's options."""
    from clusterkit.tooltext import printable

    for line in err.lines_named(option_name):
        click.echo(f"clusterkit: error: {printable(line)}", err=True)


# The command line being run (set by main): a job's request records it, job.sbatch shows it.
INVOKED: list[str] = []


def main(argv: list[str] | None = None) -> Any:
    """Entry point: run the CLI with one error boundary and documented exit codes."""
    INVOKED[:] = ["clusterkit", *(sys.argv[1:] if argv is None else argv)]  # job.sbatch records it
    for i, arg in enumerate(INVOKED[1:], 1):   # a non-UTF-8 byte arrives as a lone surrogate (surrogateescape)
        if not arg.isascii() and any("\udc80" <= ch <= "\udcff" for ch in arg):
            click.echo(f"clusterkit: error: argument {i} ({ascii(arg)[:60]}) is not valid UTF-8 text", err=True)
            sys.exit(int(ExitCode.USAGE))
    try:
        rv = cli.main(args=argv, prog_name="clusterkit", standalone_mode=False)
    except ClusterkitError as err:
        report_error(err)
        sys.exit(int(err.exit_code))
    except click.exceptions.Abort:
        click.echo("clusterkit: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        # one line, like every other error; the command's --help has the rest
        where = exc.ctx.command_path if exc.ctx else "clusterkit"
        click.echo(f"clusterkit: error: {exc.format_message()} (see '{where} --help')", err=True)
        sys.exit(int(ExitCode.USAGE))
    except click.ClickException as exc:
        click.echo(f"clusterkit: error: {exc.format_message()}", err=True)
        sys.exit(int(ExitCode.USAGE) if exc.exit_code == 2 else exc.exit_code)
    except KeyboardInterrupt:
        click.echo("clusterkit: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(int(ExitCode.FAILURE))
    sys.exit(rv if isinstance(rv, int) else 0)
