"""Arguments a job adds to what clusterkit writes: ``--srun-arg`` (every srun step) and
``--launcher-arg`` (the launcher's own argv).  Pure.

A flag clusterkit writes itself (node and task counts, CPUs per task, kill-on-bad-exit, the
rendezvous, the hostfile, include/exclude, the machine rank, ...) is refused, naming the setting
that controls it: given again it would win over clusterkit's (srun and the Python launchers
take the last value), and the counts would disagree with the plan.  Both ``--opt=value`` and
``--opt value`` are recognised, so are the abbreviations srun (getopt_long) and the Python
launchers (argparse) accept (``--nod=2`` is ``--nodes=2``), and srun's short options
(``-N2``, ``-lN 2``).  ``-`` and ``_`` are the same in a launcher's flag names here, as both
spellings exist (``--nproc-per-node``, ``--nproc_per_node``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from clusterkit.errors import PlanError

#: Linux refuses one argument longer than this in exec (MAX_ARG_STRLEN, 32 pages).
MAX_ARG_BYTES = 32 * 4096 - 1

_COUNTS = "--nodes and --gpus-per-node (or the stage)"
_TASKS = "--launcher (it decides the tasks per node)"
_LOGS = "--out (each step's output goes to the run directory's logs)"
_CONTAINER = "the site's software.container"

#: srun options clusterkit writes on its steps (or which would move a step out of the plan),
#: and what sets them instead.
OWNED_SRUN: dict[str, str] = {
    "--nodes": _COUNTS, "-N": _COUNTS, "--ntasks": _TASKS, "-n": _TASKS, "--ntasks-per-node": _TASKS,
    "--tasks-per-node": _TASKS, "--ntasks-per-core": _TASKS, "--ntasks-per-socket": _TASKS,
    "--ntasks-per-gpu": _TASKS, "--cpus-per-task": "--set cpus_per_task=N", "-c": "--set cpus_per_task=N",
    "--gpus": _COUNTS, "-G": _COUNTS, "--gpus-per-node": _COUNTS, "--gpus-per-task": _COUNTS,
    "--kill-on-bad-exit": "clusterkit (=1: one failed rank ends the step instead of leaving the rest hanging)",
    "-K": "clusterkit (=1: one failed rank ends the step instead of leaving the rest hanging)",
    "--output": _LOGS, "-o": _LOGS, "--error": _LOGS, "-e": _LOGS, "--input": "the training command",
    "-i": "the training command", "--open-mode": _LOGS,
    "--nodelist": "--exclude (the allocation decides the nodes)", "-w": "--exclude (the allocation decides the nodes)",
    "--exclude": "--exclude", "-x": "--exclude", "--relative": "--exclude (the allocation decides the nodes)",
    "-r": "--exclude (the allocation decides the nodes)", "--job-name": "--job-name", "-J": "--job-name",
    "--jobid": "clusterkit (steps run in their own job)", "--export": "--env (every variable reaches every rank)",
    "--chdir": "the directory you submit from (steps run there)",
    "-D": "the directory you submit from (steps run there)",
    "--time": "--set time=... (a step limit would cut the end-game short)", "-t": "--set time=...",
    "--signal": "scheduler.preempt_signal_s", "--container-image": _CONTAINER, "--container-mounts": _CONTAINER,
    "--container-workdir": _CONTAINER, "--container-env": _CONTAINER, "--container-name": _CONTAINER,
    "--container-mount-home": _CONTAINER, "--no-container-mount-home": _CONTAINER,
    "--pty": "nothing: a job's steps have no terminal",
}
#: srun's short options that take a value (the rest of a ``-xVALUE`` cluster is that value).
SRUN_SHORT_WITH_VALUE = "ABcCdDeGiJLmMnNopqStTwWx"
#: srun's long options that take a required value (srun(1), Slurm 23.11-24.11, and pyxis's): only
#: these take the next word as their value.  Every other option (``--oversubscribe``, ``--label``, and
#: those whose value is optional, such as ``--exclusive[=user]``, which getopt takes only after '=')
#: takes none, so a bare word after it is refused rather than becoming the step's program.
SRUN_WITH_VALUE = frozenset({
    "--account", "--acctg-freq", "--extra-node-info", "--bb", "--bbf", "--bcast-exclude", "--begin",
    "--cluster-constraint", "--clusters", "--comment", "--constraint", "--container", "--container-id",
    "--core-spec", "--cores-per-socket", "--cpu-bind", "--cpu-freq", "--cpus-per-gpu", "--cpus-per-task",
    "--deadline", "--delay-boot", "--dependency", "--chdir", "--distribution", "--error", "--epilog", "--exclude",
    "--export", "--gres", "--gres-flags", "--gpu-bind", "--gpu-freq", "--gpus", "--gpus-per-node",
    "--gpus-per-socket", "--gpus-per-task", "--het-group", "--hint", "--input", "--job-name", "--jobid",
    "--licenses", "--mail-type", "--mail-user", "--mcs-label", "--mem", "--mem-per-cpu", "--mem-per-gpu",
    "--mem-bind", "--mincpus", "--mpi", "--network", "--ntasks", "--ntasks-per-core", "--ntasks-per-gpu",
    "--ntasks-per-node", "--ntasks-per-socket", "--tasks-per-node", "--nodefile", "--nodelist", "--nodes",
    "--open-mode", "--output", "--partition", "--power", "--prefer", "--priority", "--profile", "--prolog",
    "--qos", "--reservation", "--segment", "--signal", "--slurmd-debug", "--sockets-per-node", "--switches",
    "--task-epilog", "--task-prolog", "--thread-spec", "--threads-per-core", "--time", "--time-min", "--tmp",
    "--tres-bind", "--tres-per-task", "--uid", "--gid", "--wait", "--wckey",
    "--container-image", "--container-mounts", "--container-workdir", "--container-name", "--container-save",
    "--container-env",
})


def _norm(name: str) -> str:
    return name.replace("_", "-")


def _owned(name: str, owned: Mapping[str, str]) -> str | None:
    """The owned option ``name`` sets: itself, or the one it abbreviates (a long option)."""
    table = {_norm(k): k for k in owned}
    n = _norm(name)
    if n in table:
        return table[n]
    if n.startswith("--") and len(n) > 3:
        hits = [k for nk, k in table.items() if nk.startswith("--") and nk.startswith(n)]
        if hits:
            return min(hits, key=len)
    return None


def _check_word(word: str, what: str, field: str) -> None:
    shown = repr(word[:60]) + ("..." if len(word) > 60 else "")
    if "\0" in word:
        raise PlanError("an argument cannot hold a NUL byte (no process's argv can)", field=field, value=shown)
    if len(word.encode("utf-8", "surrogateescape")) > MAX_ARG_BYTES:
        raise PlanError(f"longer than {MAX_ARG_BYTES} bytes, which Linux refuses to pass to a process "
                        "(MAX_ARG_STRLEN)", field=field, value=shown)
    if not word:
        raise PlanError(f"an empty {what} argument", field=field, value="''")


def check(words: Sequence[str], owned: Mapping[str, str], *, what: str, field: str,
          with_value: frozenset[str] | None = None, short_with_value: str = "", origin: str = "") -> None:
    """Refuse an owned flag among ``words`` (one argv word each), naming what sets it.

    ``with_value``: the long options that take a value (the next word, unless given with '='); a
    bare word after any other is refused (it would be taken for the command); None: every long
    option may take one.  ``short_with_value``: single-letter options that take one (srun's).
    ``origin`` says where the words came from when not the command line (``site job.srun_args``).
    """
    where = f" (from {origin})" if origin else ""
    expect_value = False
    for word in words:
        _check_word(word, what, field)
        shown = repr(word[:60])
        if word == "--":
            raise PlanError(f"'--' would end {what}'s options and make the rest its command{where}",
                            field=field, value=shown)
        if not word.startswith("-") or word == "-":
            if not expect_value:
                raise PlanError(f"not an option, and no option before it takes a value: {what} would take it for "
                                f"the program to run{where} (write --opt=value)", field=field, value=shown)
            expect_value = False
            continue
        name = word.split("=", 1)[0]
        hit = _owned(name, owned)
        if hit is None and not word.startswith("--") and short_with_value:
            for i, ch in enumerate(word[1:], start=1):   # a cluster of short options: -lN2
                if f"-{ch}" in owned:
                    hit = f"-{ch}"
                    break
                if ch in short_with_value:
                    expect_value = i == len(word) - 1  # -N alone: its value is the next word
                    break
            else:
                expect_value = False
        elif "=" in word:
            expect_value = False
        else:
            expect_value = with_value is None or _owned(name, dict.fromkeys(with_value, "")) is not None
        if hit is not None:
            raise PlanError(f"{what} option {hit} is clusterkit's: it is set from {owned[hit]}{where}",
                            field=field, value=shown)


def check_srun(words: Sequence[str], origin: str = "") -> None:
    """:func:`check` for srun's words: its owned options, flags and short options."""
    check(words, OWNED_SRUN, what="srun", field="srun_args", with_value=SRUN_WITH_VALUE,
          short_with_value=SRUN_SHORT_WITH_VALUE, origin=origin)
