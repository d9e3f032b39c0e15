"""The job options, declared once: what ``render``/``submit`` take on the command line, what
:func:`clusterkit.api.job_request` (and ``Site.plan``/``Site.submit``) take as keyword arguments,
which of them a site sets in its ``job:`` section (and ``stages.<stage>.job``), and which a site's
``stages.<stage>`` entry sets for the stage's jobs.

Each :class:`JobOption` names the option (the API's keyword and the CLI command's parameter), its
command-line flag and help, the API's annotation and default, the shapes the API accepts
(:mod:`clusterkit.api.inputs`) and, for a site key, how the site's value and the job's own add up
(:class:`SiteKey`), and for a stage's key its place and meaning there (:class:`StageKey`).  Derived
from :data:`OPTIONS`: the click options of ``render`` and ``submit``
(:func:`clusterkit.cli.common.job_options`), the site's ``job:`` model
(:class:`clusterkit.config.jobs.JobSection`, its fields and their meaning), the job options among
a stage's keys (:class:`clusterkit.config.jobs.StageOverride`), the API's input shapes and the site
layers' merge (:func:`clusterkit.job.request.merge_job`).  The API's typed signatures
(``job_request``, ``JobArgs``, ``Site.plan``, ``Site.submit``) are written out for type checkers;
``tests/api/test_job_options_contract.py`` fails when one of them and this table disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from clusterkit.vocab import LAUNCHER_NAME, LAUNCHERS, STAGE_NAMES

#: how the command line reads an option: ``count`` a whole number of at least 1, ``choice`` one of
#: :attr:`JobOption.choices`, ``text`` one value, ``words`` repeatable, ``flag`` on when given,
#: ``switch`` ``--x/--no-x`` (None when neither is given)
CliKind = Literal["count", "choice", "text", "words", "flag", "switch"]
#: how the site's ``job:``, the stage's ``job:`` and the job's own values add up: ``add`` (lists
#: joined in that order), ``env`` (NAME=VALUE pairs; a later value of a name wins), ``pick`` (the
#: precedence rule: the job's own, else the stage's, else the site's)
Merge = Literal["add", "env", "pick"]


@dataclass(frozen=True)
class SiteKey:
    """An option a site sets too, under ``job:`` with the option's name."""

    merge: Merge
    rank: int          # its place among the ``job:`` keys (``sites show``'s order)
    help: str          # the key's meaning (``sites schema``)


@dataclass(frozen=True)
class StageKey:
    """An option a site's ``stages.<stage>`` entry sets too, with the option's name: the stage's
    value, taken where the job gives none (:func:`clusterkit.job.request.pick`)."""

    rank: int                   # its place among a stage's keys (``sites show``'s order; the others:
                                # clusterkit.config.jobs.STAGE_OWN)
    help: str                   # the key's meaning (``sites schema``)
    pattern: str | None = None  # what a text value must match


@dataclass(frozen=True)
class JobOption:
    """One job option, as every interface takes it."""

    name: str                       # the API's keyword argument; the CLI command's parameter (but see dest)
    flag: str                       # the CLI's option, e.g. "--env-file" or "--snapshot/--no-snapshot"
    cli: CliKind
    help: str
    api_type: str                   # job_request's annotation, as written there
    api_default: Any = None
    shapes: tuple[str, ...] = ()    # what api.inputs.check accepts; (): job_request checks it itself
    metavar: str | None = None
    dest: str | None = None         # the CLI command's parameter, where it is not ``name``
    choices: tuple[str, ...] = ()
    site: SiteKey | None = None
    stage: StageKey | None = None
    group: Literal["request", "setup", "array", "long-run"] = "setup"

    @property
    def param(self) -> str:
        """The CLI command's parameter name."""
        return self.dest or self.name


_NODESET = "NODESET"

#: every job option, in the order ``submit --help`` lists them
OPTIONS: tuple[JobOption, ...] = (
    # the request: where, how many, how named (JobRequest's own fields)
    JobOption("stage", "--stage", "choice", choices=STAGE_NAMES, group="request", api_type="str | None",
              help="Deployment stage: single-node (1), multi-node (2-8), large-cluster (9+ nodes) "
                   "(default: the one that holds --nodes, else single-node)."),
    JobOption("launcher", "--launcher", "text", metavar="NAME", group="request", api_type="str | None",
              stage=StageKey(0, "a built-in launcher or one of the site's launchers:", pattern=f"^{LAUNCHER_NAME}$"),
              help=f"Launcher: {', '.join(LAUNCHERS)}, or one of the site's own (its launchers: key) "
                   "(default: the site's choice for the stage, else the stage's)."),
    JobOption("nodes", "--nodes", "count", group="request", api_type="int | None",
              stage=StageKey(1, "the default node count of this stage"),
              help="Number of nodes (default: the stage's)."),
    JobOption("gpus_per_node", "--gpus-per-node", "count", group="request", api_type="int | None",
              help="GPUs (processes) per node (default: all of the site's)."),
    # --set KEY=VALUE pairs: the CLI appends the settings' names to this help (clusterkit.job.settings)
    JobOption("settings", "--set", "words", dest="sets", metavar="KEY=VALUE", shapes=("anymap",),
              group="request", api_type="Mapping[str, Any] | None", help="Job setting, repeatable: "),
    JobOption("job_name", "--job-name", "text", shapes=("text",), group="request", api_type="str | None",
              help="Slurm job name (default: ck-<script>)."),
    JobOption("exclude", "--exclude", "text", metavar=_NODESET, shapes=("text", "words"), group="request",
              api_type="str | Sequence[str] | None", help="Nodes to keep out of the job, e.g. gpu[003,017]."),
    JobOption("debug", "--debug", "flag", api_default=False, shapes=("bool",), group="request", api_type="bool",
              help="NCCL debug logging (INFO, INIT/NET subsystems, one file per process)."),
    JobOption("debug_nodes", "--debug-nodes", "text", metavar=_NODESET, shapes=("text", "words"),
              api_type="str | Sequence[str] | None",
              help="NCCL debug logging on these nodes only, into the run's logs, e.g. gpu[003,017] "
                   "(implies --debug; above the site's logs.debug_max_nodes --debug alone keeps each "
                   "node's files on its own disk)."),
    # the job's own additions, after the site's job: section
    JobOption("env", "--env", "words", metavar="KEY=VALUE", shapes=("map", "words"),
              api_type="Mapping[str, str] | Sequence[str] | None",
              site=SiteKey("env", 0, "NAME=VALUE pairs every job exports"),
              help="Environment for every rank on every node, repeatable; the value is literal except "
                   "${SLURM_*} and ${CK_*}, which each node expands for itself."),
    JobOption("env_file", "--env-file", "words", metavar="PATH", shapes=("path", "paths"),
              api_type="StrPath | Sequence[StrPath] | None",
              help="KEY=VALUE lines and # comments (no shell), repeatable; --env wins over it."),
    JobOption("setup", "--setup", "words", metavar="CMD", shapes=("words",), api_type="Sequence[str] | None",
              site=SiteKey("add", 1, "shell commands the batch script runs before the launcher"),
              help="Shell command in the batch shell after modules and environment, before the launcher; "
                   "repeatable, run in order."),
    JobOption("node_setup", "--node-setup", "words", metavar="CMD", shapes=("words",),
              api_type="Sequence[str] | None",
              site=SiteKey("add", 2, "shell commands run once on every node before the launcher"),
              help="Shell command run once on every node (one task per node) before the launcher; repeatable."),
    JobOption("teardown", "--teardown", "words", metavar="CMD", shapes=("words",), api_type="Sequence[str] | None",
              site=SiteKey("add", 3, "shell commands the batch host runs after the training ends for good, "
                                     "succeeded or not"),
              help="Shell command on the batch host once the training has ended for good, whether it "
                   "succeeded or not ($CK_TRAINING_STATUS); repeatable, its exit recorded apart."),
    JobOption("venv", "--venv", "text", metavar="PATH", api_type="str | None",
              site=SiteKey("pick", 6, "a Python virtual environment to activate"),
              help="Python virtual environment to activate on every node."),
    JobOption("conda", "--conda", "text", metavar="ENV", api_type="str | None",
              site=SiteKey("pick", 7, "a conda environment to activate"),
              help="Conda environment (name or prefix) to activate on every node."),
    JobOption("modules", "--module", "words", metavar="NAME", shapes=("words",), api_type="Sequence[str] | None",
              site=SiteKey("add", 8, "environment modules to load"),
              help="Environment module to load after the site's, repeatable; `purge` unloads every "
                   "module loaded before it (module purge)."),
    JobOption("srun_args", "--srun-arg", "words", metavar="ARG", shapes=("words",), api_type="Sequence[str] | None",
              site=SiteKey("add", 4, "arguments added to the job's srun steps"),
              help="Argument added to every srun step, repeatable (e.g. --srun-arg=--label)."),
    JobOption("launcher_args", "--launcher-arg", "words", metavar="ARG", shapes=("words",),
              api_type="Sequence[str] | None",
              site=SiteKey("add", 5, "arguments added to the launcher's command line"),
              help="Argument added to the launcher's own argv, repeatable."),
    JobOption("sbatch", "--sbatch", "words", metavar="KEY[=VALUE]", shapes=("map", "words"),
              api_type="Mapping[str, str | bool | None] | Sequence[str] | None",
              help="Per-job Slurm option, repeatable (e.g. constraint=a100); wins over the site's."),
    JobOption("snapshot", "--snapshot/--no-snapshot", "switch", shapes=("bool",), api_type="bool | None",
              stage=StageKey(7, "run the stage's jobs in a snapshot of the code (default: the site's code.snapshot)"),
              help="Run the job in a snapshot of the code taken now (git's files of the working tree; "
                   "default: the site's code.snapshot, on unless the site turns it off), or in the live "
                   "tree as it is when the job starts."),
    JobOption("code", "--code", "text", metavar="DIR", shapes=("path",), api_type="StrPath | None",
              help="Snapshot every file under DIR rather than the working tree (git's files)."),
    # one sbatch, a task per index (clusterkit.job.array)
    JobOption("array", "--array", "text", metavar="SPEC", group="array", api_type="str | None",
              help="Job array in Slurm's syntax (0-15, 1,3,5, 0-30:10; %N: at most N tasks at once): "
                   "one sbatch, one task per index, each with its own folder, logs, port and checkpoints."),
    JobOption("sweep", "--sweep", "words", metavar="KEY=V1,V2,...", shapes=("words",), group="array",
              api_type="Sequence[str] | None",
              help="Sweep, repeatable: the product of the values is the array; each task gets "
                   "CK_SWEEP_<KEY> and {KEY} in the command replaced by its value (with --array %N: "
                   "at most N at once)."),
    # submit's alone among the commands (clusterkit.cli.longrun)
    JobOption("run_name", "--run-name", "text", metavar="NAME", group="long-run", api_type="str | None",
              help="The training run's name: CK_CHECKPOINT_DIR is <checkpoint storage>/checkpoints/<user>/NAME "
                   "(default: the job name and its first job id). The same NAME again resumes; "
                   "refused while another live job writes it."),
)

BY_NAME: dict[str, JobOption] = {o.name: o for o in OPTIONS}

#: the options a site's ``job:`` section sets, in its order
SITE_JOB: tuple[JobOption, ...] = tuple(sorted((o for o in OPTIONS if o.site is not None),
                                               key=lambda o: o.site.rank if o.site is not None else 0))

#: the options a site's ``stages.<stage>`` entry sets, in its order (beside its own keys:
#: :data:`clusterkit.config.jobs.STAGE_OWN`)
STAGE: tuple[JobOption, ...] = tuple(sorted((o for o in OPTIONS if o.stage is not None),
                                            key=lambda o: o.stage.rank if o.stage is not None else 0))

#: the options that are not JobRequest's own fields: ``job_request``'s ``**job`` (``JobArgs``)
JOB_ARGS: tuple[str, ...] = tuple(o.name for o in OPTIONS if o.group != "request")

#: what :func:`clusterkit.api.inputs.check` accepts of each option (the API's shapes)
SHAPES: dict[str, tuple[str, ...]] = {o.name: o.shapes for o in OPTIONS if o.shapes}


def group(name: str) -> tuple[JobOption, ...]:
    """The options of one group, in :data:`OPTIONS`' order."""
    return tuple(o for o in OPTIONS if o.group == name)


def site_field(option: JobOption) -> tuple[Any, Any]:
    """The ``job:`` model's field of a site option: its type and default (pydantic's pair)."""
    from pydantic import Field

    assert option.site is not None
    if option.site.merge == "env":
        return dict[str, str | int], Field(default_factory=dict)
    if option.site.merge == "add":
        return list[str], Field(default_factory=list)
    return str | None, None


def stage_field(option: JobOption) -> tuple[Any, Any]:
    """The ``stages.<stage>`` model's field of a stage option: its type and default, from how the
    command line reads it (a count is a whole number of at least 1; unset: None)."""
    from pydantic import Field

    assert option.stage is not None
    if option.cli == "count":
        return int | None, Field(None, ge=1)
    if option.cli in ("flag", "switch"):
        return bool | None, None
    if option.cli == "text":
        return str | None, Field(None, pattern=option.stage.pattern)
    raise ValueError(f"{option.name}: a stage takes one value, not a {option.cli} option")
