"""The environment rules of site files and flags: one rule for every place a site file sets
environment (``job.env``, ``software.container.env``; ``nccl.env`` takes communication names only)
and for the job's own ``--env`` (docs/architecture.md §3, the job environment's trust boundary).
"""

from __future__ import annotations

import re

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: ``nccl.env`` takes communication settings only: names with these prefixes ...
NCCL_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "UCX_", "FI_", "GLOO_", "TORCH_FR_", "OFI_NCCL_")
#: ... and these names (what NCCL's performance depends on outside its own namespace).
NCCL_ENV_NAMES = ("CUDA_DEVICE_MAX_CONNECTIONS", "TORCH_DISTRIBUTED_DEBUG")

#: Job environment names clusterkit sets itself (``job.env``, ``--env``), and what to use instead.
OWNED_ENV = {
    "MASTER_ADDR": "nothing: the rendezvous is the allocation's first host (CK_HEAD)",
    "MASTER_PORT": "nothing: the port comes from the job id (CK_PORT)",
    "RANK": "--nodes and --gpus-per-node (the launcher numbers the ranks)",
    "LOCAL_RANK": "--gpus-per-node (the launcher numbers the ranks)",
    "WORLD_SIZE": "--nodes and --gpus-per-node", "LOCAL_WORLD_SIZE": "--gpus-per-node",
    "NODE_RANK": "--nodes (each node's rank comes from Slurm)", "GROUP_RANK": "--nodes",
    "CUDA_VISIBLE_DEVICES": "--gpus-per-node (Slurm binds the GPUs)",
    "DS_ENV_FILE": "--set ds_launcher", "OMPI_MCA_orte_default_hostfile": "--launcher",
    "WCOLL": "--nodes (pdsh reads its host list from WCOLL)",
}
#: ... and name prefixes clusterkit, Slurm and the process managers own.
OWNED_ENV_PREFIXES = {
    "CK_": "nothing: CK_* are clusterkit's runtime variables", "SLURM_": "--sbatch KEY=VALUE or --srun-arg",
    "SBATCH_": "--sbatch KEY=VALUE", "SRUN_": "--srun-arg", "SALLOC_": "--sbatch KEY=VALUE",
    "PMI_": "--srun-arg=--mpi=...", "PMIX_": "--srun-arg=--mpi=...",
    # the launchers' environment twins of the flags clusterkit writes or decides: torchrun reads
    # PET_<FLAG> as --<flag> (PET_STANDALONE, PET_NO_PYTHON, PET_RDZV_ENDPOINT; accelerate's multi-GPU
    # launch goes through torchrun's parser too), the ranks' Accelerator reads ACCELERATE_USE_* and
    # ACCELERATE_DEEPSPEED_* as the strategy accelerate launch would set, pdsh (DeepSpeed's runner)
    # reads PDSH_* as its remote shell and ssh options
    "PET_": "--launcher-arg (torchrun reads PET_<FLAG> as its --<flag>)",
    "ACCELERATE_USE_": "--set strategy=... (accelerate launch sets the ranks' strategy from its config)",
    "ACCELERATE_DEEPSPEED_": "--set zero_stage=... or --launcher-arg=--config_file=... (accelerate launch "
                             "sets them from its config)",
    "PDSH_": "--set ds_launcher=... (DeepSpeed's pdsh runner sets its remote shell)",
}
#: A setup step that assigns or unsets one of clusterkit's own names (``export CUDA_VISIBLE_DEVICES=0``).
_SETUP_ASSIGN = re.compile(r"(?:^|[;&|(`{\n])\s*(?:(?:export|declare\s+-x|readonly)\s+)?([A-Z_][A-Z0-9_]*)=|"
                           r"(?:^|[;&|(`{\n])\s*unset\s+(?:-v\s+)?([A-Z_][A-Z0-9_]*)")


def setup_problem(cmd: str) -> str | None:
    """Why a ``--setup``/``--node-setup`` command may not run: it sets or unsets a name clusterkit,
    Slurm or the launcher sets for each job (the same names ``--env`` refuses), or None.  Only what
    the command's own text says is seen: a file it sources is the job's to check at run time."""
    for m in _SETUP_ASSIGN.finditer(cmd):
        name = m.group(1) or m.group(2)
        if name in OWNED_ENV:
            return f"{name} is set by clusterkit, Slurm or the launcher for each job; use {OWNED_ENV[name]}"
    return None


#: Names that change how the job script's own shells start: refused everywhere.
SHELL_ENV = ("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "IFS", "PS4", "PROMPT_COMMAND", "CDPATH", "GLOBIGNORE")
#: Names that change how shells, the loader or interpreters start: refused in a site file's
#: ``job.env`` (the site file is data; these would make it code for every rank).  A job's own
#: ``--env`` may set them: it is the user's own job.
SITE_REFUSED_ENV = (*SHELL_ENV, "PATH", "LD_LIBRARY_PATH", "PERL5LIB", "PERL5OPT", "PERLLIB", "PERL5DB", "RUBYOPT",
                    "RUBYLIB", "NODE_OPTIONS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH",
                    "GCONV_PATH", "LOCPATH", "HOSTALIASES", "TCLLIBPATH", "MODULEPATH", "GLIBC_TUNABLES",
                    # HOME: Python adds ~/.local's site-packages, whose .pth files run; zsh's start files
                    "HOME", "ZDOTDIR",
                    # OpenSSL loads the engines and providers its configuration names (Python's ssl does)
                    "OPENSSL_CONF", "OPENSSL_ENGINES", "OPENSSL_MODULES",
                    # programs that other programs run: git's ssh, less's input filter, R's start files
                    "GIT_SSH", "GIT_SSH_COMMAND", "GIT_EXEC_PATH", "LESSOPEN", "LESSCLOSE", "R_PROFILE",
                    "R_PROFILE_USER", "R_ENVIRON", "R_ENVIRON_USER",
                    # the MPI launchers' remote agents (mpirun's --mca plm_rsh_agent as environment): a
                    # program every node runs, which the site's launcher_args may name only from a trusted file
                    "HYDRA_LAUNCHER_EXEC", "I_MPI_HYDRA_BOOTSTRAP_EXEC")
SITE_REFUSED_ENV_PREFIXES = ("LD_", "PYTHON", "BASH_FUNC_", "LUA_", "LMOD_", "CONDA", "VIRTUAL_ENV", "GIT_CONFIG")
#: Open MPI's and PRRTE's parameters that name a program to run (``plm_rsh_agent``,
#: ``orte_launch_agent``, ``prte_launch_agent``, ``plm_ssh_agent``), as environment.
MPI_AGENT_ENV = re.compile(r"(OMPI|ORTE|PRTE|PMIX)_MCA_\w*_agent", re.IGNORECASE)
#: ``${SLURM_*}``/``${CK_*}`` references a value may hold: each node expands its own at launch.
ENV_REF = re.compile(r"\$\{((?:SLURM_|CK_)[A-Za-z0-9_]*)\}")
ENV_REF_PREFIXES = ("SLURM_", "CK_")
#: Any ``${NAME}`` (group 1) or ``$NAME`` (group 2) in a value.  A value's reference to its own
#: variable (``PATH=/x:$PATH``) is its value in the job before (expanded once, in the job script);
#: other ``${NAME}`` are refused, other ``$NAME`` stay literal (with a warning).
ANY_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def self_ref(name: str, value: str) -> bool:
    """Whether ``value`` refers to its own variable ``name`` (``$NAME`` or ``${NAME}``)."""
    return any((m.group(1) or m.group(2)) == name for m in ANY_REF.finditer(value))


def job_env_problem(name: str, value: str, *, site: bool) -> str | None:
    """Why ``name=value`` may not be a job's environment (``site``: given in a site file), or None."""
    if not ENV_NAME.fullmatch(name):
        return f"{name[:60]!r} is not an environment variable name (letters, digits and '_', not starting with a digit)"
    owner = OWNED_ENV.get(name) or next((v for p, v in OWNED_ENV_PREFIXES.items() if name.startswith(p)), None)
    if owner is not None:
        return f"{name} is set by clusterkit, Slurm or the launcher for each job; use {owner}"
    if name in SHELL_ENV or name.startswith("BASH_FUNC_"):
        return f"{name} changes how the job script's shells start; use --setup or --node-setup for commands"
    if site and (name in SITE_REFUSED_ENV or name.startswith(SITE_REFUSED_ENV_PREFIXES)
                 or MPI_AGENT_ENV.fullmatch(name)):
        return (f"{name} changes how shells, the loader or interpreters start, which a site file may not decide "
                "for every job (see the Security model): use software.modules or the container, "
                "or the job's own --env")
    for ref in ANY_REF.finditer(value):
        if ref.group(1) and ref.group(1) != name and not ref.group(1).startswith(ENV_REF_PREFIXES):
            return (f"{name}: {ref.group(0)} would not be expanded: values are literal except ${{SLURM_*}} and "
                    f"${{CK_*}}, which each node expands for itself, and ${name} (its value before)")
    if self_ref(name, value) and ENV_REF.search(value):
        return (f"{name}: refers both to ${name} (expanded once, in the job script) and to ${{SLURM_*}}/${{CK_*}} "
                "(expanded again on each node): use one of the two")
    if "\0" in value:
        return f"{name}: a value cannot hold a NUL byte"
    return None


#: Names a container's ``env`` may not set: clusterkit's own (each rank's place in the job, the
#: job's paths), Slurm's, NCCL's (``nccl.env`` sets those) and what changes how a shell, the
#: loader or an interpreter starts (the Security model: a site file runs nothing on its own).
CONTAINER_ENV_OWNED = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                       "NODE_RANK", "GROUP_RANK", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "PATH", "HOME",
                       "SHELL", "IFS", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND",
                       "PYTHONSTARTUP", "PYTHONHOME", "PYTHONINSPECT", "PERL5OPT", "NODE_OPTIONS")
CONTAINER_ENV_OWNED_PREFIXES = ("CK_", "SLURM_", "SRUN_", "SBATCH_", "PMI", "PYXIS_", "ENROOT_", "APPTAINER",
                                "SINGULARITY", "LD_", "BASH_FUNC_")


def container_env_problem(name: str) -> str | None:
    """Why ``software.container.env`` may not set ``name``, or None: the names :func:`job_env_problem`
    refuses in a site's ``job.env``, and those the container runtime or each rank owns."""
    if not ENV_NAME.fullmatch(name):
        return f"{name[:60]!r} is not an environment variable name"
    if name in CONTAINER_ENV_OWNED or name.startswith(CONTAINER_ENV_OWNED_PREFIXES):
        return (f"{name}: software.container.env cannot set it: clusterkit sets it per rank or job, "
                "or it changes how shells and interpreters start")
    if name.startswith(NCCL_ENV_PREFIXES) or name in NCCL_ENV_NAMES:
        return f"{name}: set communication settings in nccl.env (they reach the container too)"
    return job_env_problem(name, "", site=True)
