"""Rendering: ``render(site, plan) -> {artifact name: text}``.  Pure and deterministic.

One Jinja ``Environment`` with ``StrictUndefined`` (a missing variable is a bug, not an empty
string), ``keep_trailing_newline``, and a ``shell_quote`` filter used for every value that
reaches a shell.  A site may replace any built-in template by file name (``templates:`` in the
site config); the built-ins are the fallback.
"""

from __future__ import annotations

import json
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from clusterkit.launchers import Sh, Word, shell_join
from clusterkit.plan import Plan
from clusterkit.site import Site


def builtin_templates_dir() -> Path:
    packaged = Path(__file__).resolve().parent / "templates"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "templates"  # source checkout


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


@lru_cache(maxsize=8)
def environment(override_dir: str | None) -> jinja2.Environment:
    loaders: list[jinja2.BaseLoader] = []
    if override_dir:
        loaders.append(jinja2.FileSystemLoader(override_dir))
    loaders.append(jinja2.FileSystemLoader(str(builtin_templates_dir())))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["shell_quote"] = shell_quote
    env.filters["shell_join"] = shell_join
    env.filters["slurm_pattern"] = slurm_pattern
    return env


def container_mounts(plan: Plan) -> list[str]:
    """The site's container mounts, plus the run directory when no mount already covers it:
    the launcher inside the container reads the hostfile and configs from there."""
    mounts = list(plan.container["mounts"]) if plan.container else []
    inside = [m.split(":")[1] if ":" in m else m for m in mounts]
    run_dir = plan.run_dir.rstrip("/")
    if plan.container and not any(run_dir == d.rstrip("/") or run_dir.startswith(d.rstrip("/") + "/") for d in inside):
        mounts.append(run_dir)
    return mounts


def _launcher_words(plan: Plan) -> list[Word]:
    words: list[Word] = list(plan.launch.words)
    c = plan.container
    if c and c["runtime"] == "apptainer" and plan.launch.mode != "once":
        # apptainer wraps the per-node launcher; --nv binds the host's driver into the container
        mounts = container_mounts(plan)
        bind = ["--bind", ",".join(mounts)] if mounts else []
        words = ["apptainer", "exec", "--nv", *bind, c["image"], *words]
    return words


def launch_body(plan: Plan) -> str:
    """The per-node (or per-task) shell body; runtime variables stay escaped for each node."""
    if plan.launch.mode == "per_gpu":
        ranks = ('export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS" '
                 f'LOCAL_WORLD_SIZE={plan.gpus_per_node}; ')
        prefix = shell_join(_launcher_words(plan))
        return ranks + "exec " + (prefix + " " if prefix else "") + '"$@"'
    body = "exec " + shell_join(_launcher_words(plan) + [Sh('"$@"')])
    if plan.launcher == "deepspeed" and plan.slurm:
        # `scancel --signal=TERM` reaches every process of the step.  The `deepspeed` runner has
        # no TERM handler and would die at once, ending the task while its workers still save
        # (and a step whose task ended is killed).  Ignored, it waits for deepspeed.launcher.launch,
        # which installs its own handler (TERM to the workers, SIGKILL after 30 s); the workers
        # start with the default TERM action, so the training script's handler runs.
        body = 'trap "" TERM; ' + body
    return body


def srun_options(plan: Plan) -> list[str]:
    """srun flags for the launch step (already shell-safe words)."""
    opts = [f"--nodes={plan.nnodes}", "--kill-on-bad-exit=1"]
    if plan.launch.mode == "per_gpu":
        opts.append(f"--ntasks-per-node={plan.gpus_per_node}")
        opts.append("--output=" + shell_quote(f"{slurm_pattern(plan.run_dir)}/logs/%j.rank%t.out"))
    else:
        opts.append("--ntasks-per-node=1")
        opts.append("--output=" + shell_quote(f"{slurm_pattern(plan.run_dir)}/logs/%j.%N.out"))
    c = plan.container
    if c and c["runtime"] == "pyxis":
        opts.append("--container-image=" + shell_quote(c["image"]))
        opts.append("--container-mounts=" + shell_quote(",".join(container_mounts(plan))))
    return opts


def _hostfile(plan: Plan) -> str | None:
    d = plan.launch.dialect
    return d.render(plan.hosts, plan.gpus_per_node) if d else None


def render(site: Site, plan: Plan) -> dict[str, str]:
    """Every artifact of the plan, by file name, in a deterministic order."""
    env = environment(site.templates)
    ctx = {
        "plan": plan,
        "launch": plan.launch,
        "body": launch_body(plan),
        "srun_opts": srun_options(plan),
        "command": shell_join(plan.launch.command),
        "dialect_line": plan.launch.dialect.line("${ck_host}", plan.gpus_per_node) if plan.launch.dialect else "",
        "env": plan.env,
    }
    out: dict[str, str] = {}
    out["job.sbatch"] = env.get_template("job.sbatch.j2").render(ctx)
    out["nccl.env"] = env.get_template("nccl.env.j2").render(ctx)
    hostfile = _hostfile(plan)
    if hostfile is not None:
        out["hostfile"] = hostfile
    for name, text in sorted(plan.launch.files.items()):
        out[name] = text
    if plan.launcher == "deepspeed" and plan.launch.mode == "once":
        out[".deepspeed_env"] = env.get_template("deepspeed_env.j2").render(ctx)
    out["plan.json"] = json.dumps(plan.to_dict(), indent=2, sort_keys=True) + "\n"
    return out
