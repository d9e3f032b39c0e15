"""Rendering: ``render(site, plan) -> {artifact name: text}``.  Pure and deterministic.

One sandboxed Jinja environment with ``StrictUndefined`` (a missing variable is a bug, not an
empty string), ``keep_trailing_newline``, and a ``shell_quote`` filter used for every value that
reaches a shell.  A site may replace any built-in template by file name (``templates:`` in the
site config); the built-ins are the fallback.  The job script is an entry template per
scheduler kind (:data:`ENTRY`) made of includes by concern, any of which a site may replace.
Site templates are code from a shared file, so they render in Jinja's sandbox (no attribute
walks to Python internals); with a site directory in play each artifact renders within a budget
of ``TEMPLATE_SECONDS`` and ``TEMPLATE_MAX_BYTES``, and errors are one-line config errors.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.sandbox

from clusterkit.config.schema import Site
from clusterkit.errors import ConfigError, PlanError
from clusterkit.job import array as arrays
from clusterkit.job import choices as choices_mod
from clusterkit.job import jobenv, nccl, template_budget
from clusterkit.job.comments import comment_text
from clusterkit.job.launchers import Sh, Word, placeholders, shell_join
from clusterkit.job.nccl import EnvVar
from clusterkit.job.plan import Plan


def builtin_templates_dir() -> Path:
    packaged = Path(__file__).resolve().parents[1] / "templates"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / "templates"  # source checkout


def shell_quote(value: Any) -> str:
    """Quote one value for bash (shlex.quote, plus quotes around a leading '=' that reads like '==')."""
    text = str(value)
    quoted = shlex.quote(text)
    if quoted == text and text.startswith("="):
        quoted = f"'{text}'"
    return quoted


def slurm_pattern(path: str) -> str:
    """A literal path inside a Slurm filename pattern: '%' must be written '%%'."""
    return path.replace("%", "%%")


#: Wall-clock budget for rendering one site template, in seconds.
TEMPLATE_SECONDS = 2.0
#: Largest output of one site template, in bytes.
TEMPLATE_MAX_BYTES = 1024 * 1024


class _BudgetExceeded(Exception):
    pass


class _Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """The immutable sandbox (a template cannot change the dicts and lists it is handed, such as
    the plan's artifact map), plus a size check on '*' and '**' (``'x' * 10**9``)."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, int) and abs(right) > 64:
            raise _BudgetExceeded(f"exponent {right} is too large")
        if operator == "*" and isinstance(left, int) and isinstance(right, (str, list, tuple)):
            left, right = right, left
        if (operator == "*" and isinstance(left, (str, list, tuple)) and isinstance(right, int)
                and len(left) * right > TEMPLATE_MAX_BYTES):
                raise _BudgetExceeded(f"output larger than {TEMPLATE_MAX_BYTES} bytes")
        return super().call_binop(context, operator, left, right)


def _bytecode_cache(site: bool = False) -> jinja2.BytecodeCache | None:
    """Compiled templates, kept between runs (compiling job.sbatch.j2 costs ~30 ms per render).

    Jinja's own per-user directory (``$TMPDIR/_jinja2-cache-<uid>``): it creates it 0700 and
    refuses one owned by another user or open to others, as bytecode read from there runs.
    Without a safe directory templates are compiled each time.
    """
    try:
        # clusterkit's own file names: the sandbox compiles '*' and '**' into budget checks, so
        # bytecode another Jinja program compiled from the same file must not be taken for ours
        # (a site environment compiles unoptimized: its bytecode is kept apart from the built-ins')
        return jinja2.FileSystemBytecodeCache(pattern=f"__clusterkit_{'site' if site else 'sandbox'}_%s.cache")
    except (OSError, RuntimeError):
        return None


@lru_cache(maxsize=8)
def environment(override_dir: str | None) -> jinja2.Environment:
    loaders: list[jinja2.BaseLoader] = []
    if override_dir:
        loaders.append(jinja2.FileSystemLoader(override_dir))
    loaders.append(jinja2.FileSystemLoader(str(builtin_templates_dir())))
    env = _Sandbox(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        bytecode_cache=_bytecode_cache(bool(override_dir)),
        **(template_budget.SITE_OPTIONS if override_dir else {}),
    )
    if override_dir:   # '%' checked like '*' (and so never folded at compile time)
        env.intercepted_binops = frozenset({*env.intercepted_binops, "%"})
        env.binop_table = {**env.binop_table, "%": template_budget.checked_mod}
    env.filters["shell_quote"] = shell_quote
    env.filters["shell_join"] = shell_join
    env.filters["slurm_pattern"] = slurm_pattern
    env.filters["env_word"] = env_word
    env.filters["comment_text"] = comment_text
    return env


def env_word(var: EnvVar) -> str:
    """An environment value as one shell word: a job's own value keeps its ``${SLURM_*}``/``${CK_*}``
    references for the shell that exports it; every other value is literal."""
    if var.shell is not None:   # a policy value that expands at run time (per-job log names)
        return var.shell
    return jobenv.shell_word(var.value, var.name) if var.source == "job" else shell_quote(var.value)


def node_env(plan: Plan) -> str:
    """Exports at the head of each node's (or task's) launch body: the job's values that refer to
    ``${SLURM_*}``/``${CK_*}``, expanded there, by that node for itself."""
    return "".join(f"export {v.name}={env_word(v)}; " for v in plan.env if v.source == "job" and jobenv.refs(v.value))


def activation(plan: Plan) -> str:
    """The job's venv/conda activation in the site's (pyxis) container, at the head of the launch body;
    outside a container the batch shell activates it and srun carries it to every node."""
    if plan.container is None:
        return ""
    job = plan.job
    if job.venv:
        path = shell_quote(job.venv + "/bin/activate")
        why = shell_quote("clusterkit: cannot activate --venv " + job.venv + " in the container")
        return f". {path} || {{ echo {why} >&2; exit 1; }}; "
    if job.conda:
        why = shell_quote("clusterkit: cannot activate --conda " + job.conda + " in the container")
        return (f'{{ eval "$(conda shell.bash hook)" && conda activate {shell_quote(job.conda)}; }} || '
                f"{{ echo {why} >&2; exit 1; }}; ")
    return ""


def overridden(site: Site) -> list[str]:
    """The built-in templates the site replaces with its own (empty without ``templates:``)."""
    if not site.templates:
        return []
    builtin = {p.name for p in builtin_templates_dir().iterdir()}
    return sorted(p.name for p in Path(site.templates).iterdir() if p.name in builtin)


def override_note(site: Site) -> str | None:
    """One line naming the site's own templates, for `sites show` and `submit --dry-run`."""
    names = overridden(site)
    return f"site {site.name} renders its own templates from {site.templates}: {', '.join(names) or 'none in use'}" \
        if site.templates else None


def container_mounts(plan: Plan) -> list[str]:
    """The site's container mounts, plus the run directory when no mount already covers it:
    the launcher inside the container reads the hostfile and configs from there."""
    mounts = list(plan.container.mounts) if plan.container else []
    if plan.container and any(c in plan.run_dir for c in ",:"):
        # both runtimes read the list as "src[:dst[:flags]],...": the path would add mounts
        raise PlanError(f"run directory {plan.run_dir!r}: ',' and ':' cannot be mounted into the site's container; "
                        "choose another --out or --set container=false")
    inside = [m.split(":")[1] if ":" in m else m for m in mounts]
    run_dir = plan.run_dir.rstrip("/")
    if plan.container and not any(run_dir == d.rstrip("/") or run_dir.startswith(d.rstrip("/") + "/") for d in inside):
        mounts.append(run_dir)
    return mounts


#: apptainer's flag that binds the host's GPU driver and devices into the container, by vendor
_APPTAINER_GPU = {"nvidia": ["--nv"], "amd": ["--rocm"], "intel": []}


def _launcher_words(plan: Plan) -> list[Word]:
    words: list[Word] = list(placeholders.body_words(plan.launch.words))   # {ck:NAME}: each node's value
    c = plan.container
    if c and c.runtime == "apptainer":
        # apptainer wraps the launcher (a "once" launcher is single-node here: it runs in a step);
        # --nv (NVIDIA) or --rocm (AMD) binds the host's driver into the container
        mounts = container_mounts(plan)
        bind = ["--bind", ",".join(mounts)] if mounts else []
        home = ["--no-home"] if c.mount_home is False else []
        gpu = _APPTAINER_GPU[plan.basis.site.nodes.gpu_vendor]
        words = ["apptainer", "exec", *gpu, *home, *bind, c.image, *words]
    return words


def container_env(plan: Plan) -> list[tuple[str, str]]:
    """What the job script sets for ``software.container.env``, on the launcher's command alone (never
    in the batch shell): each value under its name (pyxis names it in ``--container-env``, so it wins
    over the image's), and for apptainer under ``APPTAINERENV_<NAME>``, which it sets inside."""
    c = plan.container
    if c is None:
        return []
    out = [(name, str(value)) for name, value in c.env.items()]
    if c.runtime == "apptainer":
        out += [(f"APPTAINERENV_{name}", value) for name, value in out]
    return out


def launch_body(plan: Plan) -> str:
    """The per-node (or per-task) shell body; runtime variables stay escaped for each node."""
    return (activation(plan) + node_env(plan) + probe_call(plan) + placeholders.body_head(plan.launch.command)
            + _launch_body(plan))


#: The run directory's script that detects the ranks' torch and NCCL (templates/nccl-probe.sh.j2).
PROBE = "nccl-probe.sh"


def probe_call(plan: Plan) -> str:
    """Sourcing the probe, where the ranks run (in the container, after the activation and the
    job's per-node values), right before the launcher: it logs which NCCL they load, warns where
    that contradicts the plan, and keeps the flight-recorder names their torch reads."""
    path = shell_quote(f"{plan.run_dir.rstrip('/') or '.'}/{PROBE}")
    why = shell_quote(f"clusterkit: warning: {PROBE} not read: NCCL and torch versions not checked")
    return f". {path} || echo {why} >&2; "


def probe_python(plan: Plan) -> tuple[str, str]:
    """(the shell words that run the ranks' Python on a program from stdin's ``-``, why it may not run).
    With apptainer the launch body runs on the host and wraps only the launcher: so does the probe."""
    c = plan.container
    if c and c.runtime == "apptainer":
        words = _launcher_words(replace(plan, launch=replace(plan.launch, words=("python3",))))
        return shell_join(words), f"python3 did not run in the container image {c.image}"
    return "python3", "no python3 on PATH where the ranks run"


def _launch_body(plan: Plan) -> str:
    if plan.launch.mode == "per_gpu":
        ranks = ('export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS" '
                 f'LOCAL_WORLD_SIZE={plan.gpus_per_node}; ')
        prefix = shell_join(_launcher_words(plan))
        return ranks + "exec " + (prefix + " " if prefix else "") + '"$@"'
    body = "exec " + shell_join([*_launcher_words(plan), Sh('"$@"')])
    if plan.launch.term == "ignore":
        # its runner ignores the TERM a warning sends every process of the step; the process it
        # starts handles it (see the launcher's module)
        body = 'trap "" TERM; ' + body
    return body


def in_step(plan: Plan) -> bool:
    """Whether the launcher starts in a Slurm job step (srun) rather than on the batch host."""
    return plan.slurm and (plan.launch.mode != "once" or plan.container is not None)


def launch_how(plan: Plan) -> str:
    """How the launcher is started, for the job script's comment."""
    if plan.launch.mode == "per_node":
        return "once per node"
    if plan.launch.mode == "per_gpu":
        return "one task per GPU"
    return "once, in the site's container" if plan.container else "once"


#: The job script's entry templates; each includes one template per concern (templates/job-*.j2).
ENTRY = {True: "job.sbatch.j2", False: "job.local.j2"}
LAUNCH_INCLUDE = {True: "job-launch.step.j2", False: "job-launch.here.j2"}


def _restart_log(plan: Plan, who: str) -> str:
    """srun's ``--output`` with one file per restart: ``<job>.r<restart>.<who>.out``.

    Slurm's filename patterns know no restart count and expand no environment variables, so
    the batch shell splices ``$SLURM_RESTART_COUNT`` in; a requeued run then never truncates
    the logs of the run before it (``clusterkit doctor`` reads each attempt apart).
    """
    job = "%A_%a" if plan.array else "%j"   # an array task's logs carry ARRAYJOB_TASK, as its name
    return ("--output=" + shell_quote(f"{slurm_pattern(plan.run_dir)}/logs/{job}.r")
            + '"${SLURM_RESTART_COUNT:-0}"' + shell_quote(f".{who}.out"))


def srun_options(plan: Plan) -> list[str]:
    """srun flags for the launch step (already shell-safe words)."""
    # --cpus-per-task on the step itself: since Slurm 22.05 srun no longer inherits sbatch's
    # (the flag, not SRUN_CPUS_PER_TASK, which some sites' profiles set for their own use)
    # --nodelist: the hosts the job launches on (chosen after its preflight: not every allocated
    # one); --ntasks: srun would take the batch's SLURM_NTASKS (the whole allocation's) as its own
    tasks = plan.gpus_per_node if plan.launch.mode == "per_gpu" else 1
    opts = [f"--nodes={plan.nnodes}", '--nodelist="$CK_NODELIST"', f"--ntasks={plan.nnodes * tasks}",
            "--kill-on-bad-exit=1", f"--cpus-per-task={plan.cpus_per_task}"]
    if plan.launch.mode == "per_gpu":
        opts.append(f"--ntasks-per-node={plan.gpus_per_node}")
        opts.append(_restart_log(plan, "rank%t"))
    else:
        opts.append("--ntasks-per-node=1")
        opts.append(_restart_log(plan, "%N"))
    c = plan.container
    if c and c.runtime == "pyxis":
        opts.append("--container-image=" + shell_quote(c.image))
        # pyxis starts in the image's WORKDIR: run where the job was submitted from, as srun does
        # without a container, so a relative `python train.py` finds the script
        opts.append("--container-mounts=" + shell_quote(",".join(container_mounts(plan))) + ',"$PWD"')
        opts.append('--container-workdir="$PWD"')
        # the image's own environment beats the job's exports of the same name (NGC images set
        # NCCL_* values): pyxis takes these names from the job's environment instead
        names = list(dict.fromkeys([v.name for v in plan.env] + list(c.env)))
        if names:
            opts.append("--container-env=" + shell_quote(",".join(names)))
        if c.name:
            opts.append("--container-name=" + shell_quote(c.name))
        if c.mount_home is not None:
            opts.append("--container-mount-home" if c.mount_home else "--no-container-mount-home")
    return opts + user_srun_args(plan)


def user_srun_args(plan: Plan) -> list[str]:
    """The job's ``--srun-arg`` words (the site's ``job.srun_args`` first), quoted for bash: added
    after clusterkit's own options on every srun step the job script writes."""
    return [shell_quote(word) for word in plan.job.srun_args]


def node_setup_options(plan: Plan) -> list[str]:
    """srun flags for a ``--node-setup`` step: one task on every node, on the host (not in the container).
    ``--ntasks`` too: srun reads the batch's SLURM_NTASKS (a task per GPU for some launchers) as its own."""
    return [f"--nodes={plan.nnodes}", '--nodelist="$CK_NODELIST"', f"--ntasks={plan.nnodes}", "--ntasks-per-node=1",
            f"--cpus-per-task={plan.cpus_per_task}", "--kill-on-bad-exit=1"]


def _hostfile(plan: Plan) -> str | None:
    d = plan.launch.dialect
    return d.render(plan.hosts, plan.gpus_per_node) if d else None


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def comment_word(word: str) -> str:
    """One word of a command line as a shell would need it, with no control character left
    (bash's ``$'...'`` form for those): the line is recorded in a comment, where a newline
    would end the comment and start a live line."""
    if not _CONTROL.search(word):
        return shlex.quote(word)
    escaped = "".join(f"\\x{ord(c):02x}" if _CONTROL.match(c) or c in "\\'" else c for c in word)
    return f"$'{escaped}'"


def training_command(plan: Plan) -> str:
    """The training command as shell words; in a sweep each ``{KEY}`` of a swept key is the
    task's value, expanded from ``CK_SWEEP_<KEY>`` (:func:`clusterkit.job.array.command_words`)."""
    if plan.array is None or not plan.array.keys:
        return shell_join(plan.launch.command)
    return " ".join(w if isinstance(w, Sh) else " ".join(arrays.command_words([w], plan.array.keys))
                    for w in plan.launch.command)


def made_by(plan: Plan) -> str:
    """The command line that produced the job, quoted safely for job.sbatch's opening comment."""
    origin = plan.basis.resolved.request.origin
    return " ".join(comment_word(w) for w in origin) if origin else "the Python API (clusterkit.Site.plan)"


def resubmit(plan: Plan) -> str:
    """The command that submits the job again without the nodes it dropped, for its result line
    (``@JOB@`` is the job id): the command line that made it, as ``submit --exclude-from``, less
    ``--out`` (that run directory exists); empty for a job made through the Python API."""
    origin = list(plan.basis.resolved.request.origin)
    if len(origin) < 2 or origin[1] not in ("submit", "render"):
        return ""
    rest: list[str] = []
    words = iter(origin[2:])
    for word in words:
        if word == "--":
            rest += [word, *words]
            break
        if word == "--out":
            next(words, None)
            continue
        if not word.startswith("--out="):
            rest.append(word)
    return " ".join(comment_word(w) for w in ["clusterkit", "submit", "--exclude-from", "@JOB@", *rest])


def hosts_env(plan: Plan) -> list[EnvVar]:
    """The job's own values that refer to ``${CK_*}``: exported again once the hosts are known
    (the environment is exported before the in-job preflight chooses them)."""
    if not plan.slurm:
        return []
    return [v for v in plan.env if v.source == "job" and any(r.startswith("CK_") for r in jobenv.refs(v.value))]


def render(site: Site, plan: Plan) -> dict[str, str]:
    """Every artifact of the plan, by file name, in a deterministic order."""
    env = environment(site.templates)
    draw = _renderer(env, site.templates)
    files, templated = dict(plan.launch.files), dict(plan.launch.templated)
    ctx = {
        "plan": plan,
        "launch": plan.launch,
        "body": launch_body(plan),
        "srun_opts": srun_options(plan),
        "srun_user_args": user_srun_args(plan),
        "command": training_command(plan),
        "dialect_line": plan.launch.dialect.line("${ck_host}", plan.gpus_per_node) if plan.launch.dialect else "",
        "env": plan.env,
        "container_env": container_env(plan),
        "container_assign": "".join(f"{name}={shell_quote(value)} " for name, value in container_env(plan)),
        "launch_include": LAUNCH_INCLUDE[in_step(plan)],
        "launch_how": launch_how(plan),
        "job": plan.job,
        "node_setup_opts": node_setup_options(plan),
        "made_by": made_by(plan),
        "sweep_cases": arrays.case_lines(plan.array) if plan.array else [],
        "sweep_names": [arrays.env_name(k) for k in plan.array.keys] if plan.array else [],
        "resubmit": resubmit(plan),
        "site_nodes": len(site.nodes.hosts),
        "hosts_env": hosts_env(plan),
        "runs": " ".join(comment_word(w) for w in plan.launch.command),
        "choices": [_CONTROL.sub("?", c.worded()) for c in choices_mod.choices(plan)],
        # RDMA across nodes: the job raises its locked-memory limit (templates/job-limits.j2)
        "rdma": site.network.fabric != "ethernet" and plan.stage != "single-node",
        "probe_python": probe_python(plan)[0], "probe_python_missing": probe_python(plan)[1],
        "python": plan.basis.resolved.request.python or "python3",   # the supervisor's (actions.render_run)
        "probe_checks": plan.nccl_checks,
        "fr_pairs": nccl.fr_pairs(list(plan.env)),
        "pdsh_env": ".deepspeed_env" in plan.launch.templated,
    }
    out: dict[str, str] = {}
    out["job.sbatch"] = draw(ENTRY[plan.slurm], ctx)
    if (plan.job.setup or plan.job.node_setup) and "ck_setup_step=" not in out["job.sbatch"]:
        # a site's own copy of the entry template from before setup steps: refuse, never drop them
        raise ConfigError.single(site.templates or "templates", None, "templates",
                                 "the site's job script template does not include job-setup.j2, so the job's "
                                 "setup steps would not run: add {% include \"job-setup.j2\" %} before the launch")
    _check_long_run_parts(site, plan, out["job.sbatch"])
    out["nccl.env"] = draw("nccl.env.j2", ctx)
    out[PROBE] = draw("nccl-probe.sh.j2", ctx)
    hostfile = _hostfile(plan)
    if hostfile is not None:
        out["hostfile"] = hostfile
    for name, text in sorted(files.items()):
        out[name] = text
    for name, template in sorted(templated.items()):
        out[name] = draw(template, ctx)
    out["plan.json"] = json.dumps(plan.to_dict(), indent=2, sort_keys=True) + "\n"
    return out


def _check_long_run_parts(site: Site, plan: Plan, script: str) -> None:
    """A site's own copy of the entry or end-game template from before chains and framework
    requeue: refuse the job rather than drop what was asked."""
    missing = None
    if plan.chain is not None and "ck_chain_ids=" not in script:
        missing = ("job-chain.sbatch.j2", "a chain member would neither stop the chain nor see it stopped",
                   'add {% include "job-chain.sbatch.j2" %} after the end-game include')
    elif plan.settings.requeue_by == "framework" and "--requeue-by framework" not in script:
        missing = ("the supervisor's --requeue-by framework (job-supervise.j2)", "the job would requeue itself as "
                   "well as the framework", "update the site's job-supervise.j2 from clusterkit's")
    if missing is not None:
        raise ConfigError.single(site.templates or "templates", None, "templates",
                                 f"the site's job script template lacks {missing[0]}, so {missing[1]}: {missing[2]}")


def _renderer(env: jinja2.Environment, override_dir: str | None) -> Any:
    """Render one template by name.  With a site's own templates in play (the entry or any
    template it includes may be one), the whole rendering runs within the budget."""

    def draw(name: str, ctx: dict[str, Any]) -> str:
        if override_dir is None:
            return _load(env, name, override_dir).render(ctx)
        return _render_bounded(lambda: _load(env, name, override_dir), ctx, name, override_dir)

    return draw


def _load(env: jinja2.Environment, name: str, override_dir: str | None) -> jinja2.Template:
    try:
        return env.get_template(name)
    except jinja2.TemplateSyntaxError as exc:
        raise _template_error(exc.filename or name, exc.lineno, f"template syntax error: {exc.message}") from None
    except (jinja2.TemplateError, UnicodeDecodeError) as exc:
        raise _template_error(str(Path(override_dir or "") / name), None, f"cannot load template: {exc}") from None


def _template_error(file: str, line: int | None, message: str) -> ConfigError:
    return ConfigError.single(file, line, "templates", message.splitlines()[0] if message else "template error")


def _render_bounded(load: Any, ctx: dict[str, Any], name: str, override_dir: str) -> str:
    # errors name the site's own file where it is known, else the site's template directory
    file = os.path.join(override_dir, name) if os.path.isfile(os.path.join(override_dir, name)) else override_dir
    parts: list[str] = []
    size = 0
    try:   # compiling is inside the budget too: Jinja evaluates what it can while it compiles
        with template_budget.deadline(TEMPLATE_SECONDS), template_budget.memory_cap():
            template = load()
            for chunk in template_budget.chunks(template.generate(ctx), TEMPLATE_SECONDS):
                size += len(chunk.encode("utf-8"))
                if size > TEMPLATE_MAX_BYTES:
                    raise _BudgetExceeded(f"output larger than {TEMPLATE_MAX_BYTES} bytes")
                parts.append(chunk)
    except (_BudgetExceeded, template_budget.OverBudget, MemoryError) as exc:
        where = _template_line(exc, file, override_dir)[0]
        raise _template_error(where, None, f"template over its budget ({TEMPLATE_SECONDS:g} s, "
                                           f"{TEMPLATE_MAX_BYTES // 1024} KiB out, "
                                           f"{template_budget.TEMPLATE_MEMORY >> 20} MiB of memory): "
                                           f"{exc or 'out of memory'}") from None
    except jinja2.TemplateSyntaxError as exc:   # an included template, loaded as it is reached
        raise _template_error(exc.filename or file, exc.lineno, f"template syntax error: {exc.message}") from None
    except jinja2.TemplateError as exc:
        raise _template_error(*_template_line(exc, file, override_dir), f"template error: {exc}") from None
    except (ArithmeticError, TypeError, ValueError, LookupError, RecursionError) as exc:
        raise _template_error(*_template_line(exc, file, override_dir),
                              f"template error: {type(exc).__name__}: {exc}") from None
    return "".join(parts)


def _template_line(exc: BaseException, file: str, override_dir: str) -> tuple[str, int | None]:
    """The site template and line, from the frames Jinja rewrites to point into template files
    (the innermost frame in one of the site's files: an include of its own, or the entry)."""
    tb = exc.__traceback__
    where: tuple[str, int | None] = (file, None)
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name == file or name.startswith(override_dir + os.sep):
            where = (name, tb.tb_lineno)
        tb = tb.tb_next
    return where
