"""sbatch's long options as Slurm's own table lists them, for the owned-option check.

sbatch reads ``#SBATCH`` lines with getopt_long: an option may be written as any prefix of its
name that no other option shares, and glibc takes a prefix shared only by aliases (same
argument, same value) as that option.  So ``--sbatch tasks-per-node=8`` is ``--ntasks-per-node``
(Slurm's alias) and ``--sbatch tasks=8`` is too.  The names are those of ``common_options`` in
Slurm's ``src/common/slurm_opt.c`` that sbatch takes (a ``set_func`` or ``set_func_sbatch``),
Slurm 26.11 (development branch, 2026-08); the one alias pair there is ``tasks-per-node`` /
``ntasks-per-node`` (``LONG_OPT_NTASKSPERNODE``), and releases since 20.02 add no other.
"""

from __future__ import annotations

SBATCH_LONG_OPTIONS = frozenset({
    "account", "acctg-freq", "array", "autocomplete", "batch", "bb", "bbf", "begin", "chdir", "cluster",
    "cluster-constraint", "clusters", "comment", "consolidate-segments", "constraint", "container",
    "container-id", "context", "contiguous", "core-spec", "cores-per-socket", "cpu-freq", "cpus-per-gpu",
    "cpus-per-task", "deadline", "delay-boot", "dependency", "distribution", "error", "exclude", "exclusive",
    "export", "export-file", "external", "extra", "extra-node-info", "get-user-env", "gid", "gpu-bind",
    "gpu-freq", "gpus", "gpus-per-node", "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "help",
    "hint", "hold", "ignore-pbs", "input", "job-name", "kill-on-invalid-dep", "licenses", "mail-type",
    "mail-user", "mcs-label", "mem", "mem-bind", "mem-per-cpu", "mem-per-gpu", "mem-update", "mincpus",
    "network", "nice", "no-kill", "no-requeue", "nodefile", "nodelist", "nodes", "ntasks", "ntasks-per-core",
    "ntasks-per-gpu", "ntasks-per-node", "ntasks-per-socket", "ntasks-per-tres", "oom-kill-step", "open-mode",
    "output", "overcommit", "oversubscribe", "parsable", "partition", "prefer", "priority", "profile",
    "propagate", "qos", "quiet", "reboot", "requeue", "reservation", "resources", "resv-ports", "runtime",
    "segment", "signal", "sockets-per-node", "spread-job", "spread-segments", "stepmgr", "switches",
    "tasks-per-node", "test-only", "thread-spec", "threads-per-core", "time", "time-min", "tmp", "tres-bind",
    "tres-per-task", "uid", "usage", "use-min-nodes", "verbose", "version", "wait", "wait-all-nodes", "wckey",
    "wrap"
})
#: sbatch options that are another option under a second name (the same getopt value).
ALIASES = {"tasks-per-node": "ntasks-per-node"}


def meanings(key: str) -> list[str]:
    """The sbatch options ``--key`` may stand for, by their own names (aliases resolved): the one
    it names exactly, else every option it is a prefix of (one for an unambiguous abbreviation;
    several where sbatch would refuse it as ambiguous); ``[key]`` for a name sbatch's table lacks
    (a SPANK plugin's, or a newer Slurm's)."""
    if key in SBATCH_LONG_OPTIONS:
        return [ALIASES.get(key, key)]
    hits = sorted({ALIASES.get(name, name) for name in SBATCH_LONG_OPTIONS if name.startswith(key)})
    return hits or [key]
