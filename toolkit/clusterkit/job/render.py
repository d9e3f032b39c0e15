"""Rendering: ``render(site, plan) -> {artifact name: text}``.  Pure and deterministic.

The job script is an entry template per scheduler kind (:data:`ENTRY`) made of includes by
concern, any of which a site may replace.  The templates render in the sandboxed environment of
:mod:`clusterkit.job.templating` (a site's own within a budget); the parts of the script built in
Python from the plan come from :mod:`clusterkit.job.script_parts`.
"""

from __future__ import annotations

import json

from clusterkit import jobfiles
from clusterkit.config.schema import Site
from clusterkit.errors import ConfigError
from clusterkit.job import array as arrays
from clusterkit.job import choices as choices_mod
from clusterkit.job import image, nccl
from clusterkit.job.plan import Plan
from clusterkit.job.script_parts import (
    _CONTROL,
    PROBE,
    comment_word,
    container_env,
    container_mounts,
    hosts_env,
    in_step,
    launch_body,
    launch_how,
    made_by,
    node_setup_options,
    node_setup_wrap,
    probe_python,
    resubmit,
    srun_options,
    training_command,
    user_srun_args,
)
from clusterkit.job.templating import _renderer, environment, overridden, override_note, shell_quote

__all__ = ["ENTRY", "LAUNCH_INCLUDE", "container_mounts", "overridden", "override_note", "render"]


#: The job script's entry templates; each includes one template per concern (templates/job-*.j2).
ENTRY = {True: "job.sbatch.j2", False: "job.local.j2"}
LAUNCH_INCLUDE = {True: "job-launch.step.j2", False: "job-launch.here.j2"}
#: The run directory's script that names the rendezvous host of a head node (site network.rendezvous_host).
RDZV = jobfiles.RENDEZVOUS_HOST


def _hostfile(plan: Plan) -> str | None:
    d = plan.launch.dialect
    return d.render(plan.hosts, plan.gpus_per_node) if d else None


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
        "node_setup_env": node_setup_wrap(plan)[0], "node_setup_image": node_setup_wrap(plan)[1],
        "teardown_args": "".join(" --teardown=" + shell_quote(cmd) for cmd in plan.job.teardown),
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
        "image": image.staged(plan.container),
        "code_dir": plan.code.job_dir(plan.run_dir) if plan.code is not None else None,
        "jobfiles": jobfiles.template_names(),   # the run directory's file names, as Python reads them
    }
    out: dict[str, str] = {}
    out["job.sbatch"] = draw(ENTRY[plan.slurm], ctx)
    if (plan.job.setup or plan.job.node_setup) and "ck_setup_step=" not in out["job.sbatch"]:
        # a site's own copy of the entry template from before setup steps: refuse, never drop them
        raise ConfigError.single(site.templates or "templates", None, "templates",
                                 "the site's job script template does not include job-setup.j2, so the job's "
                                 "setup steps would not run: add {% include \"job-setup.j2\" %} before the launch")
    _check_long_run_parts(site, plan, out["job.sbatch"])
    if image.staged(plan.container) is not None and "export CK_IMAGE" not in out["job.sbatch"]:
        # a site's own entry template from before image staging: every step would name a file never made
        raise ConfigError.single(site.templates or "templates", None, "templates",
                                 "the site's job script template does not include job-image.sbatch.j2, so the "
                                 "container image (software.container.cache_dir) would never be staged: add "
                                 "{% include \"job-image.sbatch.j2\" %} after job-environment.j2")
    if plan.code is not None and "CK_CODE_DIR=" not in out["job.sbatch"]:
        # a site's own entry template from before code snapshots: the job would run the live tree
        raise ConfigError.single(site.templates or "templates", None, "templates",
                                 "the site's job script template does not include job-code.j2, so the job would not "
                                 "start in its code snapshot: add {% include \"job-code.j2\" %} after job-lib.sh.j2, "
                                 "or submit with --no-snapshot")
    out["nccl.env"] = draw("nccl.env.j2", ctx)
    out[PROBE] = draw("nccl-probe.sh.j2", ctx)
    if plan.slurm and site.network.rendezvous_host is not None:
        out[RDZV] = draw("rendezvous-host.sh.j2", ctx)
    hostfile = _hostfile(plan)
    if hostfile is not None:
        out[jobfiles.HOSTFILE] = hostfile
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
    elif plan.slurm and site.network.rendezvous_host is not None and "CK_RDZV_RESOLVE" not in script:
        missing = (f"network.rendezvous_host's {RDZV} (job-hosts.sbatch.j2)", "the launchers would "
                   "rendezvous at the head's own name", "update the site's job-hosts.sbatch.j2 from clusterkit's")
    elif plan.job.teardown and "--teardown=" not in script:
        missing = ("the supervisor's --teardown (job-supervise.j2)", "the job's teardown steps would not run",
                   "update the site's job-supervise.j2 from clusterkit's")
    elif plan.settings.requeue_by == "framework" and "--requeue-by framework" not in script:
        missing = ("the supervisor's --requeue-by framework (job-supervise.j2)", "the job would requeue itself as "
                   "well as the framework", "update the site's job-supervise.j2 from clusterkit's")
    if missing is not None:
        raise ConfigError.single(site.templates or "templates", None, "templates",
                                 f"the site's job script template lacks {missing[0]}, so {missing[1]}: {missing[2]}")
