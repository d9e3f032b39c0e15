"""What :func:`clusterkit.job.plan.make_plan` refuses before anything is queued: the request
against the site (nodes, GPUs, exclude list, settings nothing would use), the job's own
environment, arguments and activation, preemption and long runs.  Pure; each refusal is a
:class:`~clusterkit.errors.PlanError` naming the field."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from clusterkit.config.envrules import ENV_REF
from clusterkit.config.schema import Site
from clusterkit.errors import FieldProblem, PlanError
from clusterkit.job import jobargs, launchers, stages
from clusterkit.job import settings as settings_mod
from clusterkit.job import spares as spares_mod
from clusterkit.job.launchers import Launch
from clusterkit.job.request import Resolved
from clusterkit.job.settings import Settings
from clusterkit.vocab import StageSpec, slurm_seconds


def _check_preemption(site: Site, launch: Launch, spec: StageSpec, time: str, max_restarts: int,
                      flagged: bool, allocates: bool) -> None:
    """Refuse what the preemption path cannot serve: no room for the warning, ranks out of reach
    (``allocates``: the site's scheduler requeues; :class:`clusterkit.job.scheduling.SchedulerParts`)."""
    if not allocates or not (stages.requeues(spec, launch.mode) or flagged):
        return
    signal_s = site.scheduler.preempt_signal_s
    # Slurm checks --signal times about once a minute, so the warning may come up to 60 s early
    if slurm_seconds(time) <= signal_s + 60 and max_restarts > 0:
        raise PlanError(f"time limit {time} leaves no room for the time-limit warning: it must be longer than "
                        f"scheduler.preempt_signal_s {signal_s} s + 60 s (Slurm may signal up to 60 s early); "
                        "or --set max_restarts=0: no warning, no requeue")
    if launch.mode == "once" and max_restarts > 0:
        # The warning reaches the ranks through their Slurm job steps (scancel --signal=TERM);
        # a launcher that starts its workers over SSH/MPI from the batch host has no steps.
        raise PlanError(f"{launch.name} starts "
                        "its workers over SSH from the batch host, outside Slurm's job steps, so a preemption or "
                        "time-limit warning cannot reach every rank and requeue would lose their work: "
                        "use --set max_restarts=0 (no requeue) or a launcher that runs through srun")


def _check_long_run(site: Site, r: Resolved, spec: StageSpec, allocates: bool) -> None:
    """A framework's requeue has a requeue to do, a dependency has a Slurm to wait in (the stop
    signal's launchers are settings.USED_BY's; docs/architecture.md: long runs)."""
    s, request = r.settings, r.request
    if s.requeue_by == "framework" and not spec.requeue:
        raise PlanError(f"the {spec.name} stage does not requeue (no time-limit warning, no requeue): "
                        "use a multi-node or large-cluster stage", field="settings.requeue_by", value="framework")
    if (request.dependency or request.chain) and not allocates:
        raise PlanError(f"site {site.name} is a local site: no Slurm to hold a job until another ends",
                        field="chain" if request.chain else "after")


def _exclude_list(site: Site, exclude: Iterable[str]) -> tuple[str, ...]:
    """The exclude list, sorted; every node on it must be one of the site's."""
    listed = tuple(sorted(set(exclude)))
    known = set(site.nodes.hosts)
    unknown = [h for h in listed if h not in known]
    if unknown:
        raise PlanError(f"cannot exclude {', '.join(unknown)}: not in {site.name}'s nodelist {site.nodes.nodelist}")
    return listed


def _candidates(site: Site, exclude: tuple[str, ...], nnodes: int, spares: int = 0) -> tuple[str, ...]:
    """The site's hosts the job may land on, in nodelist order: enough for ``nnodes`` and the spares."""
    wanted = nnodes + spares
    out = set(exclude)
    hosts = tuple(h for h in site.nodes.hosts if h not in out)
    if len(hosts) < wanted:
        asked = f"{nnodes} nodes and {spares} spare(s)" if spares else f"{nnodes} nodes"
        raise PlanError(f"{asked} requested but only {len(hosts)} of {site.name}'s nodes remain "
                        f"after excluding {len(exclude)}" if exclude else
                        f"{asked} requested but site {site.name} has {len(hosts)} nodes")
    return hosts


def _check_spares(site: Site, r: Resolved, nnodes: int, exclude: tuple[str, ...],
                  allocates: bool) -> tuple[int, str | None]:
    """The spare nodes asked for (:mod:`clusterkit.job.spares`): only where the job checks its nodes
    itself (the in-job preflight chooses which ``nnodes`` of the allocation it launches on)."""
    return spares_mod.choose(site, r.spec.name, r.settings.spares, r.stage_spares, nnodes,
                             bool(r.preflight_in_job), exclude, allocates)


def _unused_settings(s: Settings, launcher: str, site: Site) -> list[str]:
    """The --set keys given (not None), in order; :func:`_check_used_key` refuses each it must."""
    return [key for key in sorted(s.model_fields_set) if getattr(s, key) is not None]


def _check_used_key(s: Settings, key: str, launcher: str, site: Site, allocates: bool) -> None:
    """Refuse a --set key the launcher or site would ignore: nothing given is silently dropped."""
    users = settings_mod.used_by(key)
    if not settings_mod.acts_on(key, launcher):
        raise PlanError(f"the {launcher} launcher does not use it; it is used by {', '.join(users)}",
                        field=f"settings.{key}")
    if key in settings_mod.SLURM_ONLY and not allocates:
        raise PlanError(f"site {site.name} is a local site (no Slurm); "
                        f"{key} applies to Slurm sites only", field=f"settings.{key}")


def _check_job(site: Site, r: Resolved, launch: Launch, nnodes: int, in_container: bool, allocates: bool) -> None:
    """The job's own environment and activation, where this job can honour them (docs/architecture.md §3)."""
    job = r.job
    if r.settings.node_setup_in == "container" and not in_container:
        raise PlanError("the --node-setup steps run in the site's container, but this job has none (the site "
                        "names no software.container, or --set container=false)", field="settings.node_setup_in",
                        value="container")
    per_node = [e for e in job.env if ENV_REF.search(e.value)]
    if per_node and allocates and launch.mode == "once" and nnodes > 1 and not in_container:
        e = per_node[0]
        raise PlanError(f"{launch.name} starts its workers over SSH from the batch host, outside Slurm, so "
                        f"{e.name}={e.value!r} ({e.origin}) cannot be expanded on each node: use a value without "
                        "${...}, or a launcher that runs through srun")
    if in_container and site.software.container is not None:
        runtime = site.software.container.runtime
        if job.modules:
            raise PlanError("the job runs in the site's container, where the host's modules do not apply "
                            "(build them into the image, or --set container=false)",
                            field="modules", value=" ".join(job.modules))
        if runtime != "pyxis" and (job.venv or job.conda):
            what = "venv" if job.venv else "conda"
            raise PlanError(f"the site's {runtime} container starts the launcher directly, with no shell to "
                            "activate an environment in: build it into the image, or --set container=false",
                            field=what, value=job.venv or job.conda)
    if job.venv and job.conda:
        raise PlanError("give --venv or --conda, not both (each replaces the other's python)", field="venv",
                        value=job.venv)


def _check_job_args(site: Site, r: Resolved, launcher: str, allocates: bool) -> None:
    """``--srun-arg`` and ``--launcher-arg`` words (the site's job: section's first): none that
    clusterkit owns, nothing that would end up as the program to run."""
    job, own = r.job, r.request.job
    for words, mine, site_key, check_one in (
            (job.srun_args, own.srun_args, "job.srun_args", jobargs.check_srun),
            (job.launcher_args, own.launcher_args, "job.launcher_args",
             lambda w, origin: _check_launcher(site, launcher, w, origin))):
        if not words:
            continue
        first_own = len(words) - len(mine)
        if first_own:
            check_one(words[:first_own], f"the site's {site_key}")
        check_one(words, "")
    if job.srun_args and not allocates:
        raise PlanError(f"site {site.name} is a local site: no srun steps to add them to", field="srun_args",
                        value=repr(job.srun_args[0]))


def _check_not_launched_twice(launch: Launch, command: tuple[str, ...]) -> None:
    """A command that starts the launcher itself (``accelerate launch --config_file x train.py``,
    as scripts write it) would run it inside clusterkit's own."""
    program = launch.words[0] if launch.words else None
    if program and command and os.path.basename(command[0]) == program:
        raise PlanError(f"the command starts {program} itself, which clusterkit already starts for the "
                        f"{launch.launcher} launcher: put its options in --launcher-arg and the training script "
                        "after '--'",
                        field="command", value=repr(" ".join(command[:3])[:80]))


def _check_launcher(site: Site, launcher: str, words: tuple[str, ...], origin: str) -> None:
    owned = launchers.owned_args(launcher, site.launchers)
    if owned is None:
        raise PlanError(f"the {launcher} launcher starts every rank as an srun task, with no launcher process to "
                        "take arguments: use --srun-arg", field="launcher_args", value=repr(words[0][:60]))
    jobargs.check(words, owned, what=launcher, field="launcher_args", origin=origin)


def run_dir_off_shared(site: Site, run_dir: str, nnodes: int, allocates: bool) -> str | None:
    """Why ``run_dir`` cannot serve a job of ``nnodes`` nodes on ``site`` (every node reads the
    hostfile and launcher configs from it; ``allocates``: the site's scheduler grants the nodes), or
    None.  A preview (``render``) shows it as a warning; ``submit`` refuses it (:func:`clusterkit.actions.submit`)."""
    if nnodes < 2 or not allocates or not os.path.isabs(run_dir):
        return None
    if site.on_shared_storage(run_dir):
        return None
    shared = [os.path.normpath(st.path) for st in site.shared_storage]
    return (f"run directory {os.path.normpath(run_dir)} is not on {site.name}'s shared storage "
            f"({', '.join(shared) or 'none declared'}), but all {nnodes} nodes read its hostfile and configs: "
            "submit from a login node with --out under a shared path, or declare the filesystem in the site's "
            "storage list with shared: true")


def _check_request(site: Site, r: Resolved, allocates: bool) -> tuple[int, int, tuple[str, ...]]:
    """Node count, GPUs per node and exclude list; every independent problem with the request
    (node range, GPUs, exclude list, settings the launcher or site would ignore, a container the
    site lacks) reported at once, not one per attempt."""
    found: list[PlanError] = []

    def attempt(check: Any, *args: Any) -> Any:
        try:
            return check(*args)
        except PlanError as exc:
            found.append(exc)
            return None

    request, s = r.request, r.settings
    nnodes = attempt(stages.node_count, r.spec, site, r.nodes)
    gpn = request.gpus_per_node or site.nodes.gpus_per_node
    if gpn < 1 or gpn > site.nodes.gpus_per_node:
        found.append(PlanError(f"site {site.name} nodes have {site.nodes.gpus_per_node} GPUs", field="gpus_per_node",
                               value=str(gpn)))
    exclude = attempt(_exclude_list, site, request.exclude)
    for key in _unused_settings(s, r.launcher, site):
        attempt(_check_used_key, s, key, r.launcher, site, allocates)
    if "keep_checkpoints" in s.model_fields_set and s.model_params is None:
        found.append(PlanError("it goes with --set model_params=SIZE (the checkpoints' room is checked for "
                               "the model's size)", field="settings.keep_checkpoints"))
    if s.model_params is not None and allocates and r.preflight_in_job is not True:
        found.append(PlanError("the checkpoint directory's room is checked by the job's own preflight, which is "
                               + ("off: add --set preflight_in_job=true" if not r.preflight_in_job else
                                  "--perf here: use --set preflight_in_job=true"), field="settings.model_params"))
    if s.container and not site.software.container:
        found.append(PlanError(f"but site {site.name} configures no software.container", field="settings.container",
                               value="true", sep=" "))
    if len(found) == 1:
        raise found[0]
    if found:  # the one check without a field of its own is the exclude list's
        raise PlanError.about([p for exc in found for p in (exc.problems or (FieldProblem("exclude", str(exc)),))])
    return nnodes, gpn, exclude
