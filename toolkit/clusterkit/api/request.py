"""The job request from Python's arguments: every input checked and named by its field
(``Site.plan`` and the CLI's job options build theirs here)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from clusterkit.errors import InputError
from clusterkit.job import settings as settings_mod
from clusterkit.job.request import JobRequest, JobSetup
from clusterkit.vocab import stage_for_nodes

from . import inputs
from .job import StrPath


def job_request(command: Sequence[str], *, stage: str | None = None, launcher: str | None = None,
                nodes: int | None = None, gpus_per_node: int | None = None,
                settings: Mapping[str, Any] | None = None, job_name: str | None = None,
                exclude: str | Sequence[str] | None = None, debug: bool = False,
                env: Mapping[str, str] | Sequence[str] | None = None,
                env_file: StrPath | Sequence[StrPath] | None = None,
                setup: Sequence[str] | None = None, node_setup: Sequence[str] | None = None,
                teardown: Sequence[str] | None = None,
                srun_args: Sequence[str] | None = None, launcher_args: Sequence[str] | None = None,
                venv: str | None = None, conda: str | None = None, modules: Sequence[str] | None = None,
                sbatch: Mapping[str, str | bool | None] | Sequence[str] | None = None,
                run_name: str | None = None, array: str | None = None,
                sweep: Sequence[str] | None = None, snapshot: bool | None = None,
                code: StrPath | None = None, debug_nodes: str | Sequence[str] | None = None) -> JobRequest:
    """The :class:`~clusterkit.job.plan.JobRequest` for :meth:`Site.plan`'s arguments (the CLI's
    job options build theirs here too), every input checked and named by its field.

    The job's own additions come after the site's ``job:`` section: ``env`` (``{"HF_HOME": ...}``
    or ``["HF_HOME=...", ...]``; after the lines of each ``env_file``, so a name in both takes
    ``env``'s value), ``setup`` and ``node_setup`` (shell commands in the job before the
    launcher: once in the batch shell, once per node), ``teardown`` (shell commands on the batch
    host once the training has ended for good, whether it succeeded or not), ``srun_args``, ``launcher_args``,
    ``venv``/``conda`` (activated in the job), ``modules`` (loaded after the site's) and
    ``sbatch`` (per-job Slurm options: ``{"constraint": "a100"}`` or ``["constraint=a100"]``).
    ``run_name`` names the training run across jobs: ``CK_CHECKPOINT_DIR`` is
    ``<checkpoint storage>/checkpoints/<user>/<run_name>`` (default: the job name and its first job id).
    ``array`` (Slurm's ``--array`` syntax, ``"0-15%4"``) and ``sweep`` (``["lr=0.1,0.01", "seed=1,2"]``:
    the cartesian product is the array) make a job array (:mod:`clusterkit.job.array`).
    ``snapshot=False`` runs the job in the live tree rather than a snapshot of the code taken now;
    ``code`` snapshots that directory rather than the working tree (:mod:`clusterkit.codesnap`).
    ``debug_nodes`` (a host list) turns ``debug`` on for those nodes alone (:mod:`clusterkit.job.debuglogs`)."""
    inputs.check(command, locals())   # the parameters alone: each of its shape, all text UTF-8
    from clusterkit import hostlist
    from clusterkit.vocab import LAUNCHER_NAME, LAUNCHERS, STAGE_NAMES

    if isinstance(command, str):
        raise InputError("give the command as a list of words, e.g. ['python', 'train.py']", field="command")
    words = tuple(command)
    if not words or not all(isinstance(w, str) for w in words):
        raise InputError("give the command as a non-empty list of strings, e.g. ['python', 'train.py']",
                         field="command")
    if not words[0].strip():
        raise InputError("is empty; e.g. python train.py", field="command", sep=" ")
    if stage is not None and stage not in STAGE_NAMES:
        raise InputError(f"choose one of {', '.join(STAGE_NAMES)}", field="stage", value=repr(stage))
    if launcher is not None and (not isinstance(launcher, str) or not re.fullmatch(LAUNCHER_NAME, launcher)):
        # a name the site's own launchers: may hold is checked against the site when the job is planned
        raise InputError(f"choose one of {', '.join(LAUNCHERS)}, or one of the site's own (its launchers: key)",
                         field="launcher", value=repr(launcher))
    for name, number in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 1):
            raise InputError("must be a whole number of at least 1", field=name, value=repr(number))
    excluded: tuple[str, ...] = ()
    if exclude:
        try:
            excluded = tuple(hostlist.expand(exclude if isinstance(exclude, str) else ",".join(exclude)))
        except hostlist.HostlistError as exc:
            raise InputError(str(exc), field="exclude") from None
    debugged: tuple[str, ...] = ()
    if debug_nodes:
        try:
            debugged = tuple(hostlist.expand(debug_nodes if isinstance(debug_nodes, str) else ",".join(debug_nodes)))
        except hostlist.HostlistError as exc:
            raise InputError(str(exc), field="debug_nodes") from None
    values = dict(settings or {})
    settings_mod.build(values)  # every problem now, each at settings.<key>
    if stage is None:
        stage = stage_for_nodes(nodes) if nodes is not None else "single-node"
    w = inputs.words
    job = JobSetup(env=(*inputs.env_files(env_file), *inputs.env(env)), setup=w("setup", setup),
                   node_setup=w("node_setup", node_setup), teardown=w("teardown", teardown),
                   srun_args=w("srun_args", srun_args),
                   launcher_args=w("launcher_args", launcher_args), venv=inputs.text("venv", venv),
                   conda=inputs.text("conda", conda), modules=w("modules", modules), sbatch=inputs.sbatch(sbatch))
    from clusterkit.job import array as arrays

    if array is not None and not isinstance(array, str):
        raise InputError("give the array as Slurm's text, e.g. '0-15%4'", field="array")
    if code is not None and snapshot is False:
        raise InputError("a directory to snapshot was given with the snapshot turned off: drop one of them "
                         "(--code, --no-snapshot)", field="code", value=repr(os.fspath(code))[:80])
    if run_name is not None:
        from clusterkit.job.longrun import RUN_NAME, RUN_NAME_RULE

        if not isinstance(run_name, str) or not RUN_NAME.fullmatch(run_name):
            raise InputError(RUN_NAME_RULE, field="run_name", value=repr(str(run_name)[:80]))
    return JobRequest(stage=stage, command=words, launcher=launcher, nodes=nodes, gpus_per_node=gpus_per_node,
                      job_name=job_name, settings=values, debug=debug or bool(debugged), debug_nodes=debugged,
                      exclude=excluded, job=job,
                      run_name=run_name, array=arrays.request(array, inputs.words("sweep", sweep)),
                      snapshot=snapshot, code_dir=None if code is None else os.fspath(code))
