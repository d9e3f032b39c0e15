"""Sites and plans from Python: load a site, plan, render, dry-run and submit a job (``docs/api.md``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from typing_extensions import Unpack

from clusterkit import actions
from clusterkit.config.load import load_site
from clusterkit.config.schema import Site as SiteConfig
from clusterkit.errors import InputError
from clusterkit.job.request import JobRequest
from clusterkit.scheduler import traits
from clusterkit.scheduler.records import RecordStore
from clusterkit.vocab import TRANSPORTS

from . import inputs
from .job import Job, StrPath
from .request import job_request
from .rundir import RunDir

if TYPE_CHECKING:
    from clusterkit.config.load import SiteEntry
    from clusterkit.job.checkpoint import Capacity
    from clusterkit.preflight.capacity import CheckpointNeed
    from clusterkit.preflight.report import NodeResult, Report
    from clusterkit.sites.admin import DriftRun
    from clusterkit.sites.create import Draft
    from clusterkit.sizing import Sizing, SizingRequest

class JobArgs(TypedDict, total=False):
    """The job's own additions (:func:`job_request`'s keyword arguments of the same names)."""

    env: Mapping[str, str] | Sequence[str] | None
    env_file: StrPath | Sequence[StrPath] | None
    setup: Sequence[str] | None
    node_setup: Sequence[str] | None
    teardown: Sequence[str] | None
    srun_args: Sequence[str] | None
    launcher_args: Sequence[str] | None
    venv: str | None
    conda: str | None
    modules: Sequence[str] | None
    sbatch: Mapping[str, str | bool | None] | Sequence[str] | None
    run_name: str | None
    array: str | None                 # a job array: Slurm's --array syntax
    sweep: Sequence[str] | None       # a sweep: KEY=V1,V2 items, their product the array
    snapshot: bool | None             # False: run the live tree, no code snapshot (--no-snapshot)
    code: StrPath | None              # snapshot this directory rather than the working tree (--code)
    debug_nodes: str | Sequence[str] | None   # --debug only on these nodes (a host list; turns debug on)


class Site:
    """A validated site config: the cluster (or this machine) jobs are planned for and run on.

    Load one with :meth:`Site.load`; :attr:`config` is the frozen, validated site model.
    """

    def __init__(self, config: SiteConfig) -> None:
        self.config: SiteConfig = config

    @classmethod
    def load(cls, name_or_path: StrPath) -> Site:
        """The site named ``name_or_path`` on the site search path (``local``, ``testbed``, ...), or
        the site file at that path.  Raises :class:`~clusterkit.errors.ConfigError` (every problem,
        each with ``file:line``) for an invalid file."""
        return cls(load_site(os.fspath(inputs.of("site", name_or_path, "path"))))

    @classmethod
    def load_file(cls, path: StrPath) -> Site:
        """``clusterkit sites validate PATH``: the site file at ``path`` (never a name on the
        search path); :class:`~clusterkit.errors.ConfigError` lists every problem."""
        from clusterkit.config.load import load_file

        return cls(load_file(inputs.of("path", path, "path")))

    @staticmethod
    def check_partial(path: StrPath) -> bool:
        """``clusterkit sites validate``: if ``path`` is a partial config (``_*.yaml``, pulled in
        with ``extends:``), validate it as a fragment (what it sets must be valid; the keys a
        site must have may be left out) and return True; False for a whole site file."""
        from clusterkit.config.load import check_partial, is_partial

        if not is_partial(path):
            return False
        check_partial(path)
        return True

    @staticmethod
    def schema() -> dict[str, Any]:
        """``clusterkit sites schema``: the JSON Schema of site files (for editors)."""
        from clusterkit.config.load import json_schema

        return json_schema()

    @staticmethod
    def init_from_slurm(name: str, *, partition: str | None = None, nodes: str | None = None,
                        probe_with: str | None = None) -> Draft:
        """``clusterkit sites init NAME --from-slurm``: a commented, valid site file drafted from
        the live Slurm cluster (``draft.text``; ``draft.missing``, ``unverified`` and
        ``unreachable`` say what to check).  Nothing is written."""
        from clusterkit.sites.admin import init_site

        return init_site(name, partition=partition, nodes=nodes, probe_with=probe_with)

    @staticmethod
    def init_from_example(name: str, example: str) -> Draft:
        """``clusterkit sites init NAME --from-example EXAMPLE``: a shipped example site as site
        ``name``, comments kept, without Slurm (``draft.companions``: the partial files it
        extends, to be written beside it).  Nothing is written."""
        from clusterkit.sites.admin import init_from_example

        return init_from_example(name, example)

    @property
    def source(self) -> str:
        """Where the site was read from (its file, ``extends:`` merged)."""
        return self.config.source

    @property
    def overridden_templates(self) -> list[str]:
        """The built-in templates this site replaces with its own (``sites show`` names them)."""
        from clusterkit.job.render import overridden

        return list(overridden(self.config))

    def to_dict(self) -> dict[str, Any]:
        """``clusterkit sites show``: the site as clusterkit sees it, ``extends:`` merged, defaults filled."""
        return self.config.model_dump(mode="json")

    @property
    def name(self) -> str:
        """The site's name (``name:`` in its file)."""
        return self.config.name

    @property
    def scheduler(self) -> str:
        """``slurm`` or ``local``."""
        return self.config.scheduler.kind

    def __repr__(self) -> str:
        return f"Site({self.name!r}, scheduler={self.scheduler!r})"

    def plan(self, command: Sequence[str], *, stage: str | None = None, launcher: str | None = None,
             nodes: int | None = None, gpus_per_node: int | None = None,
             settings: Mapping[str, Any] | None = None, job_name: str | None = None,
             exclude: str | Sequence[str] | None = None, debug: bool = False, **job: Unpack[JobArgs]) -> Plan:
        """A job for this site: ``command`` (argv, e.g. ``["python", "train.py", "--lr", "3e-4"]``)
        started by ``launcher`` on ``nodes`` nodes of ``gpus_per_node`` GPUs each.

        The arguments are the CLI's job options: ``stage`` (default: the stage that fits
        ``nodes``, else ``single-node``), ``launcher`` (default: the site's, else the stage's),
        ``settings`` (``--set``: ``{"zero_stage": 3, "micro_batch": 4}``), ``exclude`` (a Slurm
        host list or a list of hosts), ``debug`` (NCCL debug logging), and the job's own additions
        (``env``, ``env_file``, ``setup``, ``node_setup``, ``srun_args``, ``launcher_args``,
        ``venv``, ``conda``, ``modules``, ``sbatch``: see :func:`job_request`).  Inputs are checked here;
        the plan itself is made once, when the job is rendered or submitted.  Raises
        :class:`~clusterkit.errors.InputError` with the field path, e.g. ``settings.zero_stag``.
        """
        return Plan(self, job_request(command, stage=stage, launcher=launcher, nodes=nodes,
                                   gpus_per_node=gpus_per_node, settings=settings, job_name=job_name,
                                   exclude=exclude, debug=debug, **job))

    def submit(self, command: Sequence[str], *, stage: str | None = None, launcher: str | None = None,
               nodes: int | None = None, gpus_per_node: int | None = None,
               settings: Mapping[str, Any] | None = None, job_name: str | None = None,
               exclude: str | Sequence[str] | None = None, debug: bool = False, out: StrPath | None = None,
               preflight: bool = True, wait: bool = False, **job: Unpack[JobArgs]) -> Job:
        """Plan, preflight, render and submit a job; the same as ``self.plan(...).submit(...)``.

        See :meth:`plan` for the job arguments and :meth:`Plan.submit` for ``out``,
        ``preflight`` and ``wait``.
        """
        planned = self.plan(command, stage=stage, launcher=launcher, nodes=nodes, gpus_per_node=gpus_per_node,
                            settings=settings, job_name=job_name, exclude=exclude, debug=debug, **job)
        return planned.submit(out=out, preflight=preflight, wait=wait)

    def preflight(self, nodes: str | Sequence[str] | None = None, *, stage: str | None = None,
                  transport: str | None = None, accept_new_host_keys: bool = False,
                  on_start: Callable[[list[str]], None] | None = None,
                  on_result: Callable[[NodeResult], None] | None = None,
                  srun_args: Sequence[str] = (), checkpoint: CheckpointNeed | None = None) -> Report:
        """Check ``nodes`` (a Slurm host list or a list of hosts; default: the site's nodelist) for
        ``stage`` over ``transport`` (``ssh``, ``srun`` or ``local``; default ``local`` on a local
        site, else the site's ``preflight.transport``, ``ssh`` unless set): GPUs and driver,
        InfiniBand/RoCE ports, GPUDirect RDMA, storage.
        ``srun_args`` go on the srun step (``transport="srun"`` only; a job's ``--srun-arg``
        words, checked as a job's are).

        Returns the :class:`~clusterkit.preflight.report.Report`; bad nodes are in it, not raised
        (over srun, nodes Slurm has drained or down are not asked: :func:`actions.preflight_skip`).
        ``on_start(hosts)`` is called before any node is contacted, ``on_result(node)`` as each
        node answers.  ``checkpoint`` (a :class:`~clusterkit.preflight.capacity.CheckpointNeed`;
        :meth:`checkpoint_need` makes one) adds the checkpoint capacity check.  Raises
        :class:`~clusterkit.errors.InputError` for a bad argument (``field`` ``nodes``, ``stage``
        or ``transport``).
        """
        from clusterkit.preflight.run import run_preflight

        if transport is not None and transport not in TRANSPORTS:
            raise InputError(f"choose one of {', '.join(TRANSPORTS)}", field="transport", value=repr(transport))
        transport = transport or ("local" if not traits(self.scheduler).allocates else self.config.preflight.transport)
        srun_args = tuple(srun_args)
        if srun_args:
            from clusterkit.job import jobargs

            if transport != "srun":
                raise InputError("is for the srun transport only (--transport srun)", field="srun_args",
                                 value=repr(srun_args[0][:60]))
            jobargs.check_srun(srun_args)
        hosts = nodes if nodes is None or isinstance(nodes, str) else ",".join(inputs.of("nodes", nodes, "words"))
        inputs.check(None, {"nodes": hosts, "stage": stage})
        return run_preflight(self.config, stage, hosts, transport, accept_new_host_keys=accept_new_host_keys,
                             on_start=on_start, on_result=on_result, srun_args=srun_args,
                             skip=actions.preflight_skip(self.config, hosts, transport), checkpoint=checkpoint)

    def checkpoint_need(self, params: int, keep: int = 2, path: str | None = None, *,
                        warn_only: bool = False) -> CheckpointNeed:
        """What :meth:`preflight` checks the checkpoint directory for: ``keep`` checkpoints of a
        ``params``-parameter model in ``path`` (default: this site's checkpoint directory)."""
        from clusterkit.preflight.capacity import need

        return need(self.config, params, keep, path, warn_only=warn_only)

    def size(self, request: SizingRequest) -> Sizing:
        """``clusterkit plan``: the launcher, ZeRO stage and node count for a model on this site's
        GPUs (``request`` is a :class:`clusterkit.sizing.SizingRequest`: ``total_params`` and
        optional constraints); ``sizing.recommended`` is the choice, ``sizing.to_dict()`` all of it."""
        from clusterkit import sizing as est

        inputs.instance("request", request, est.SizingRequest, "a clusterkit.sizing.SizingRequest")
        return est.size_job(est.Hardware.from_site(self.config), request)

    def checkpoint_capacity(self, params: int, gpus: int, keep: int) -> Capacity:
        """Whether ``keep`` checkpoints of a ``params``-parameter model saved by ``gpus`` ranks fit
        the free space and inodes of this site's checkpoint directory (:mod:`clusterkit.job.checkpoint`)."""
        from clusterkit.preflight.space import here

        return here(self.config, params, gpus, keep)

    def render_sized(self, sizing: Sizing, command: Sequence[str], *, out: StrPath | None = None,
                     job_name: str | None = None, settings: Mapping[str, Any] | None = None,
                     origin: Sequence[str] = (), keep_checkpoints: int = 2) -> RunDir:
        """``clusterkit plan --render``: render the recommended setup of ``sizing`` (launcher, stage,
        nodes and its settings) for ``command``; ``settings`` win over the recommendation's.
        ``origin``: the command line that asked for it, recorded in job.sbatch.  Where the job's
        own preflight runs, it checks the room for ``keep_checkpoints`` of the model's checkpoints."""
        from clusterkit.sizing import Sizing as SizingResult

        inputs.instance("sizing", sizing, SizingResult, "the Sizing that Site.size returned")
        request = job_request(command, job_name=job_name, settings=settings)
        run = actions.render_sized(self.config, sizing, request.command, _out(out), job_name=job_name,
                                   settings=request.settings, origin=tuple(origin),
                                   keep_checkpoints=keep_checkpoints)
        return RunDir._of(run, self)


def sites() -> list[SiteEntry]:
    """``clusterkit sites list``: every site file on the search path, in lookup order (``name``,
    ``path``, ``origin``, ``shadowed``); :meth:`Site.load_file` reads one."""
    from clusterkit.config.load import list_sites

    return list_sites()


def drift(refs: Sequence[str] = (), *, every: bool = False, probe_with: str | None = None, write: bool = False,
          dry_run: bool = False) -> DriftRun:
    """``clusterkit sites drift``: compare the sites named ``refs`` (or ``every`` site of this
    cluster) with the live cluster, key by key; ``write`` puts the live facts into the files,
    ``dry_run`` only computes that diff.  ``run.exit_code``, ``run.to_json()``, ``run.diffs``."""
    from clusterkit.sites.admin import drift_sites

    return drift_sites(inputs.of("refs", refs, "words"), every=every, probe_with=probe_with, write=write,
                       dry_run=dry_run)


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Plan:
    """A job request bound to a site, checked; rendered or submitted with one plan each time.

    Make one with :meth:`Site.plan`.  :attr:`request` is the same request model the CLI builds.
    """

    site: Site
    request: JobRequest

    def render(self, out: StrPath | None = None, *, write: bool = True, submitting: bool = False) -> RunDir:
        """Write the run directory (``out``, which must be new or empty; default
        ``./runs/<job>-<time>``) without submitting: job.sbatch, nccl.env, plan.json and the
        launcher's files.  Nothing is left behind when it fails.  ``write=False``: the same
        files in :attr:`RunDir.files`, nothing written or created (``path`` is where they would
        go).  Raises :class:`~clusterkit.errors.PlanError`,
        :class:`~clusterkit.errors.RunDirError` (field ``out``) or
        :class:`~clusterkit.errors.InputError`.  ``submitting``: as :meth:`submit` renders: in a
        snapshot of the code (unless the request or site turns it off), a command whose script the
        snapshot lacks refused (:class:`~clusterkit.errors.SnapshotError`); without it, a snapshot
        only where the request asks for one (``snapshot=True``, ``code``)."""
        run = actions.render_run(self.site.config, self.request, _out(out), write=write, submitting=submitting)
        return RunDir._of(run, self.site)

    def dry_run(self, out: StrPath | None = None) -> str:
        """What :meth:`submit` would hand to the scheduler, byte for byte: job.sbatch's text; nothing
        is submitted, no node is contacted (so preflight's node exclusions are not applied) and
        nothing is written unless ``out`` is given (then the run directory is, as :meth:`render`)."""
        return self.render(out, write=out is not None, submitting=True).sbatch

    def submit(self, *, out: StrPath | None = None, preflight: bool = True, wait: bool = False,
               preflight_transport: str | None = None,
               on_gate: Callable[[actions.Gate], None] | None = None, after: str | None = None) -> Job:
        """Preflight the nodes the job could get (unless ``preflight=False``; only where the site
        sets ``preflight.before_submit: true`` or ``preflight_transport`` (``ssh``, ``srun``) is
        given: otherwise a Slurm job checks its own nodes as its first step), render the run
        directory once and hand it to the site's scheduler; a record is kept.

        ``on_gate`` sees preflight's verdict before anything is written.  A refusal raises
        :class:`~clusterkit.actions.PreflightRefused` (``.report`` has the nodes).  With
        ``wait=True`` the call returns once the job ended (see :meth:`Job.wait`).  A record that
        could not be saved after the scheduler took the job is not raised: the job runs and
        :attr:`Job.unsaved` says why ``Job.find`` will not know it.

        ``after`` (``"JOB[:ok|any]"``, JOB a Slurm job id or ``SITE:JOB_ID``) holds the job until
        that one ended successfully (``ok``, the default) or at all (``any``).  A ``run_name``
        that another live job writes is refused (:class:`~clusterkit.errors.PlanError`, field
        ``run_name``) unless the job waits for that one.
        """
        job, = self._submit(out=out, preflight=preflight, preflight_transport=preflight_transport,
                            on_gate=on_gate, after=after, chain=None)
        if wait:
            job.wait()
        return job

    def submit_chain(self, n: int, *, out: StrPath | None = None, preflight: bool = True,
                     preflight_transport: str | None = None, on_gate: Callable[[actions.Gate], None] | None = None,
                     after: str | None = None) -> list[Job]:
        """Submit ``n`` jobs of this plan, each ``afterany`` the one before, sharing the first
        one's run name (so each resumes from its checkpoints); a member that fails for a reason
        a restart cannot fix (doctor's verdict: user code, launcher config, imports) cancels the
        rest.  With ``out``, member K's run directory is ``<out>/member-K``.  Slurm sites only."""
        return self._submit(out=out, preflight=preflight, preflight_transport=preflight_transport,
                            on_gate=on_gate, after=after, chain=inputs.count("chain", n))

    def _submit(self, *, out: StrPath | None, preflight: bool, preflight_transport: str | None,
                on_gate: Callable[[actions.Gate], None] | None, after: str | None, chain: int | None) -> list[Job]:
        from clusterkit import chain as chain_mod
        from clusterkit.job.longrun import parse_after

        store = RecordStore()
        queued = chain_mod.submit(self.site.config, self.request, _out(out), store,
                                  after=None if after is None else parse_after(inputs.of("after", after, "text")),
                                  chain=chain, skip_preflight=not preflight, preflight_transport=preflight_transport,
                                  on_gate=on_gate)
        return [Job(q.submission.record, store, unsaved=q.submission.unsaved, run=RunDir._of(q.run, self.site),
                    untagged=q.submission.untagged) for q in queued]


def _out(out: StrPath | None) -> str | None:
    return None if out is None else os.fspath(inputs.of("out", out, "path"))


# --------------------------------------------------------------------------- job


