"""The job script's parts that are built in Python from the plan, for the templates: the launch
body each node (or task) runs, the srun options of its steps, the container's mounts and
environment, the NCCL probe's call, and the command lines its comments record
(:mod:`clusterkit.job.render`).  Pure."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace

from clusterkit import jobfiles
from clusterkit.errors import PlanError
from clusterkit.job import array as arrays
from clusterkit.job import debuglogs, gpubind, image, jobenv
from clusterkit.job.launchers import Sh, Word, placeholders, shell_join
from clusterkit.job.nccl import EnvVar
from clusterkit.job.plan import Plan
from clusterkit.job.templating import env_word, shell_quote, slurm_pattern


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
    if plan.launch.env_flag and words:
        # mpirun's -x NAME: the job's variables reach every rank however its daemons start
        names = dict.fromkeys([*plan.launch.env_sent, *(v.name for v in plan.env)])
        words[1:1] = [w for name in names for w in (plan.launch.env_flag, name)]
    c = plan.container
    if c and c.runtime != "pyxis":
        # apptainer (or singularity) wraps the launcher (a "once" launcher is single-node here: it runs in a step);
        # --nv (NVIDIA) or --rocm (AMD) binds the host's driver into the container
        mounts = container_mounts(plan)
        bind = ["--bind", ",".join(mounts)] if mounts else []
        home = ["--no-home"] if c.mount_home is False else []
        gpu = _APPTAINER_GPU[plan.basis.site.nodes.gpu_vendor]
        # `run`: the image's runscript starts the launcher (given its words as arguments); else `exec`
        img: Word = Sh(f'"${image.IMAGE_VAR}"') if image.staged(c) else c.image   # the staged SIF, exported
        words = [c.runtime, "run" if c.runscript else "exec", *gpu, *home, *bind, img, *words]
    return words


def container_env(plan: Plan) -> list[tuple[str, str]]:
    """What the job script sets for ``software.container.env``, on the launcher's command alone (never
    in the batch shell): each value under its name (pyxis names it in ``--container-env``, so it wins
    over the image's), and for apptainer under ``APPTAINERENV_<NAME>``, which it sets inside."""
    c = plan.container
    if c is None:
        return []
    out = [(name, str(value)) for name, value in c.env.items()]
    if c.runtime != "pyxis":   # APPTAINERENV_<NAME> or SINGULARITYENV_<NAME>, set inside
        out += [(f"{c.runtime.upper()}ENV_{name}", value) for name, value in out]
    return out


def launch_body(plan: Plan) -> str:
    """The per-node (or per-task) shell body; runtime variables stay escaped for each node."""
    debugged = plan.basis.resolved.request.debug_nodes if plan.slurm else ()   # a local site: its one node
    return (activation(plan) + node_env(plan) + debuglogs.node_filter(debugged)
            + probe_call(plan) + placeholders.body_head(plan.launch.command) + _launch_body(plan))


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
    if c and c.runtime != "pyxis":
        words = _launcher_words(replace(plan, launch=replace(plan.launch, words=("python3",))))
        return shell_join(words), f"python3 did not run in the container image {c.image}"
    return "python3", "no python3 on PATH where the ranks run"


def _launch_body(plan: Plan) -> str:
    if plan.launch.mode == "per_gpu":
        ranks = ('export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS" '
                 f'LOCAL_WORLD_SIZE={plan.gpus_per_node}; ')
        if plan.basis.resolved.gpu_bind == "task":
            ranks += gpubind.task_binding(plan.basis.site.nodes.gpu_vendor)
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


def _restart_log(plan: Plan, who: str) -> str:
    """srun's ``--output`` with one file per restart: ``<job>.r<restart>.<who>.out``.

    Slurm's filename patterns know no restart count and expand no environment variables, so
    the batch shell splices ``$SLURM_RESTART_COUNT`` in; a requeued run then never truncates
    the logs of the run before it (``clusterkit doctor`` reads each attempt apart).
    """
    job = "%A_%a" if plan.array else "%j"   # an array task's logs carry ARRAYJOB_TASK, as its name
    head, tail = jobfiles.rank_log(job, "@", who).split("@")   # the batch shell's restart between them
    return ("--output=" + shell_quote(f"{slurm_pattern(plan.run_dir)}/{jobfiles.LOGS}/{head}")
            + '"${SLURM_RESTART_COUNT:-0}"' + shell_quote(tail))


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
    return opts + _pyxis_options(plan) + user_srun_args(plan)


def _pyxis_options(plan: Plan) -> list[str]:
    """pyxis's srun flags for the site's container (none for another runtime, or no container)."""
    opts: list[str] = []
    c = plan.container
    if c and c.runtime == "pyxis":
        # a staged squashfs ($CK_IMAGE, templates/job-image.sbatch.j2), else the image as the site names it
        opts.append(f'--container-image="${image.IMAGE_VAR}"' if image.staged(c) else
                    "--container-image=" + shell_quote(c.image))
        # pyxis starts in the image's WORKDIR: run where the job was submitted from, as srun does
        # without a container, so a relative `python train.py` finds the script
        opts.append("--container-mounts=" + shell_quote(",".join(container_mounts(plan))) + ',"$PWD"')
        opts.append('--container-workdir="$PWD"')
        # the image's own environment beats the job's exports of the same name (NGC images set
        # NCCL_* values): pyxis takes these names from the job's environment instead
        names = list(dict.fromkeys([v.name for v in plan.env] + list(c.env)))
        if names:
            opts.append("--container-env=" + shell_quote(",".join(names)))
        name = image.container_name(c)
        if name:
            opts.append("--container-name=" + name)
        if c.mount_home is not None:
            opts.append("--container-mount-home" if c.mount_home else "--no-container-mount-home")
    return opts


def user_srun_args(plan: Plan) -> list[str]:
    """The job's ``--srun-arg`` words (the site's ``job.srun_args`` first), quoted for bash: added
    after clusterkit's own options on every srun step the job script writes."""
    return [shell_quote(word) for word in plan.job.srun_args]


def node_setup_options(plan: Plan) -> list[str]:
    """srun flags for a ``--node-setup`` step: one task on every node, on the host, or with
    ``--set node_setup_in=container`` in pyxis's container as the launcher's step is.
    ``--ntasks`` too: srun reads the batch's SLURM_NTASKS (a task per GPU for some launchers) as its own."""
    opts = [f"--nodes={plan.nnodes}", '--nodelist="$CK_NODELIST"', f"--ntasks={plan.nnodes}", "--ntasks-per-node=1",
            f"--cpus-per-task={plan.cpus_per_task}", "--kill-on-bad-exit=1"]
    return opts + (_pyxis_options(plan) if setup_in_image(plan) else [])


def setup_in_image(plan: Plan) -> bool:
    """Whether the ``--node-setup`` steps run in the site's container (``--set node_setup_in=container``)."""
    return plan.container is not None and plan.basis.resolved.settings.node_setup_in == "container"


def node_setup_wrap(plan: Plan) -> tuple[str, str]:
    """(what goes before srun, what goes before ``bash -c``) for a ``--node-setup`` step: the
    container's environment and, for apptainer or singularity, ``RUNTIME exec FLAGS IMAGE``
    (exec, never the runscript: the step is a shell command); empty on the host."""
    if not setup_in_image(plan):
        return "", ""
    assign = "".join(f"{name}={shell_quote(value)} " for name, value in container_env(plan))
    c = plan.container
    image = "" if c is None or c.runtime == "pyxis" else shell_join(
        _launcher_words(replace(plan, container=c.model_copy(update={"runscript": False}),
                                launch=replace(plan.launch, words=()))))
    return ("env " + assign if assign else ""), (image + " " if image else "")


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
