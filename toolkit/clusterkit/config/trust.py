"""What a site file may run: one trust rule (docs/architecture.md §3, the job environment's trust
boundary).

A site file is data, but some of its keys are code every job runs: a ``templates:`` override
(and every file under its directory, an include's ``parts/`` too), ``job.setup`` and
``job.node_setup`` (commands), ``job.venv`` and ``job.conda`` (their activation scripts run in
the job's shell), and ``job.srun_args`` that name a program srun runs (``--task-prolog``,
``--task-epilog``, ``--prolog``, ``--epilog``, or any abbreviation of them, which srun's
getopt_long accepts), and ``job.launcher_args`` that hand words on to the program a launcher
starts (DeepSpeed's ``--launcher_args`` to pdsh or mpirun, Horovod's ``--mpi-args`` to mpirun, or
an abbreviation argparse accepts), ``software.container`` (the image every rank runs in),
``launchers.<name>`` (a site's own launcher: its argv is a program jobs run) and a
``software.modules`` entry given as a path (a module file is Tcl or Lua that ``module load``
runs; a name is looked up on the admins' ``MODULEPATH``).  Each is honoured only from files, and
their directories, that no user but you or root can write.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from clusterkit.config.schema import JobSection, Site
from clusterkit.config.yaml_lines import KeyPath
from clusterkit.errors import ConfigError

#: srun options whose value is a program srun (or slurmstepd) runs for the step or each task.
SRUN_CODE_OPTIONS = ("--task-prolog", "--task-epilog", "--prolog", "--epilog")
#: launcher options whose value goes on to another program's command line (pdsh, mpirun), which
#: can name programs to run (mpirun's ``--mca plm_rsh_agent``, ``-x LD_PRELOAD=...``); an
#: abbreviation counts from the length that no longer means another option (``--launcher``, ``--mpi``).
LAUNCHER_CODE_OPTIONS = {"--launcher-args": "--launcher-a", "--mpi-args": "--mpi-a"}
#: ``job:`` keys that run code in every job, and what they run (for the error).
CODE_KEYS = {"setup": "setup commands run", "node_setup": "setup commands run", "teardown": "teardown commands run",
             "venv": "a venv's activate script runs", "conda": "a conda environment's activation scripts run",
             "srun_args": "srun runs a --task-prolog/--task-epilog/--prolog/--epilog program",
             "launcher_args": "the launcher hands --launcher_args/--mpi-args on to pdsh or mpirun, which run programs",
             "container": "every rank runs in the container image", "modules": "a module file given as a path runs",
             "launchers": "the site's own launcher runs its argv's program"}
JOB_CODE_KEYS = ("setup", "node_setup", "teardown", "venv", "conda", "srun_args", "launcher_args")
#: The most entries a template directory may hold (each is checked).
MAX_TEMPLATE_ENTRIES = 10_000

Where = Callable[[KeyPath], "tuple[str, int | None]"]


def writable_by_others(path: Path) -> str | None:
    """Why ``path`` (followed, if a link) is not yours alone to write, or None."""
    try:
        st = path.stat()
    except OSError as exc:
        return f"cannot be checked ({exc.strerror})"
    if st.st_uid not in (0, os.getuid()):
        return f"is owned by uid {st.st_uid}, not by you or root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "others" if st.st_mode & stat.S_IWOTH else "its group"
        return f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def replaceable_by_others(folder: Path) -> tuple[Path, str] | None:
    """A folder above ``folder`` in which another user could rename ``folder`` away and put their
    own in its place (owned by another user, or writable by group or others without the sticky
    bit that ``/tmp`` has), and why; None if there is none."""
    for above in folder.parents:
        try:
            st = above.stat()
        except OSError as exc:
            return above, f"cannot be checked ({exc.strerror})"
        if st.st_uid not in (0, os.getuid()):
            return above, f"is owned by uid {st.st_uid}, not by you or root"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            who = "others" if st.st_mode & stat.S_IWOTH else "its group"
            return above, f"is writable by {who} without the sticky bit (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _problems(paths: Sequence[Path], folders: Sequence[Path]) -> tuple[Path, str] | None:
    for path in paths:
        problem = writable_by_others(path)
        if problem:
            return path, problem
    for folder in folders:
        found = replaceable_by_others(folder)
        if found:
            return found
    return None


def check_templates(site_file: Path, tdir: Path, where: tuple[str, int | None]) -> None:
    """A template override is code: honour it only where no other user could have written it,
    every file and folder under its directory included (Jinja opens ``parts/x.j2`` as readily),
    nor replaced a folder above the site file or the template directory."""
    paths = [site_file.resolve(), site_file.resolve().parent, tdir, *_tree(tdir, where)]
    found = _problems(paths, [site_file.resolve().parent, tdir])
    if found:
        path, problem = found
        raise ConfigError.single(where[0], where[1], "templates",
                                 f"template override refused: {path} {problem}; templates are code and are used "
                                 "only from files that no other user can write")


def _tree(top: Path, where: tuple[str, int | None]) -> list[Path]:
    """Every entry under ``top``; for a symlink, what it points to and the folder that holds that
    (Jinja follows links).  Bounded: a link loop or a huge tree is refused, not walked forever."""
    found: list[Path] = []
    for root, dirs, files in os.walk(top, followlinks=True):
        dirs.sort()
        for name in sorted(dirs + files):
            entry = Path(root) / name
            found.append(entry)
            if entry.is_symlink():
                target = entry.resolve()
                found += [target, target.parent]
        if len(found) > MAX_TEMPLATE_ENTRIES:
            raise ConfigError.single(where[0], where[1], "templates",
                                     f"template override refused: more than {MAX_TEMPLATE_ENTRIES} entries under "
                                     f"{top} (or a link loop)")
    return found


def runs_code(section: JobSection, key: str) -> bool:
    """Whether ``job.<key>`` of ``section`` is set to something that runs code."""
    if key == "srun_args":
        return any(srun_code_option(word) for word in section.srun_args)
    if key == "launcher_args":
        return any(launcher_code_option(word) for word in section.launcher_args)
    return bool(getattr(section, key))


def srun_code_option(word: str) -> str | None:
    """The program-running srun option ``word`` sets (itself or an abbreviation), or None."""
    name = word.split("=", 1)[0].replace("_", "-")
    if not name.startswith("--") or len(name) < 4:
        return None
    return next((opt for opt in SRUN_CODE_OPTIONS if opt.startswith(name)), None)


def launcher_code_option(word: str) -> str | None:
    """The launcher option ``word`` sets whose value reaches another program's command line, or None."""
    name = word.split("=", 1)[0].replace("_", "-")
    return next((opt for opt, shortest in LAUNCHER_CODE_OPTIONS.items()
                 if name.startswith(shortest) and opt.startswith(name)), None)


def check_job_code(site: Site, where: Where) -> None:
    """The site's ``job:`` keys that run code (and each stage's): honoured only from files no
    other user can write, like a template override."""
    sections: list[tuple[KeyPath, JobSection]] = [(("job",), site.job)]
    sections += [(("stages", stage, "job"), o.job) for stage, o in site.stages.items() if o.job is not None]
    for prefix, section in sections:
        for key in CODE_KEYS:
            if key in JOB_CODE_KEYS and runs_code(section, key):
                _check_key((*prefix, key), where)
    if site.software.container is not None:
        _check_key(("software", "container"), where)
    for name in site.launchers:
        _check_key(("launchers", name), where)
    for i, module in enumerate(site.software.modules):
        if module_is_path(module):
            _check_key(("software", "modules", i), where)


def module_is_path(module: str) -> bool:
    """Whether ``module load`` takes ``module`` as a file's path rather than a name on MODULEPATH."""
    return module.startswith(("/", ".", "~")) or "/../" in module


def _check_key(key: Sequence[str | int], where: Where) -> None:
    file, line = where(tuple(key))
    path = Path(file).resolve()
    found = _problems([path, path.parent], [path.parent])
    if found:
        p, problem = found
        raise ConfigError.single(file, line, ".".join(map(str, key)),
                                 f"refused: {p} {problem}; {CODE_KEYS[_code_key(key)]} in every job, so it is used "
                                 "only from site files that no other user can write")


def _code_key(key: Sequence[str | int]) -> str:
    """The :data:`CODE_KEYS` entry of ``key`` (``software.modules.3`` is ``modules``)."""
    return "launchers" if key[0] == "launchers" else next(str(k) for k in reversed(key) if str(k) in CODE_KEYS)
