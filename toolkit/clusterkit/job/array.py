"""Job arrays and sweeps: ``--array SPEC`` (Slurm's syntax, checked here) and ``--sweep
KEY=V1,V2,...`` (the cartesian product of the values becomes the array).

An array is one sbatch of one rendered job script with ``#SBATCH --array=SPEC``: Slurm starts a
task per index.  Each task is told its index (``CK_ARRAY_INDEX``), gets its own folder
(``<run dir>/tasks/<index>``), logs, rendezvous port and checkpoint directory, and is requeued on
its own (``scontrol requeue ARRAYJOB_TASK``); see ``templates/job-array.sbatch.j2``.

A sweep's values are user data, never code: the job script assigns each one, shell-quoted, to
``CK_SWEEP_<KEY>`` in a ``case`` on the task's index, and every ``{KEY}`` in the training
command becomes a double-quoted expansion of that variable (:func:`command_words`).
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clusterkit.errors import InputError, PlanError

#: Slurm's own ceiling on MaxArraySize (slurm.conf(5)): no index may reach it on any cluster.
SLURM_MAX_ARRAY_SIZE = 4_000_001
#: Slurm's default MaxArraySize: the limit where neither the site (``scheduler.max_array_size``)
#: nor, at submit, the cluster says otherwise.
DEFAULT_MAX_ARRAY_SIZE = 1001
#: Arrays of at most this many tasks have their indices checked while parsing.
MAX_CHECKED_NOW = 100_000
#: The most tasks one sweep may make (one ``case`` line each in the job script).
MAX_SWEEP_TASKS = 10_000
_ITEM = re.compile(r"([0-9]{1,7})(?:-([0-9]{1,7})(?::([0-9]{1,7}))?)?")   # ASCII digits: '٣' is none
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
_BAD_VALUE = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class ArraySpec:
    """``--array SPEC`` parsed: the indices, in order, and the throttle (``%N``: at most N
    tasks running at once)."""

    text: str                   # as Slurm reads it (the #SBATCH --array value)
    ranges: tuple[range, ...]   # the items, never expanded before the size is checked
    throttle: int | None = None

    @property
    def top(self) -> int:
        return max(r[-1] for r in self.ranges)

    def indices(self) -> tuple[int, ...]:
        """Every index, sorted (built only once the largest is known to be within the limit)."""
        every = [i for r in self.ranges for i in r]
        unique = tuple(sorted(set(every)))
        if len(unique) != len(every):
            raise InputError("an index is listed twice", field="array", value=repr(self.text[:80]))
        return unique


@dataclass(frozen=True)
class ArrayRequest:
    """What the user asked for: an array spec, a sweep (keys and their values), or both (then
    the spec may only throttle: ``--array %4``)."""

    spec: ArraySpec | None = None
    sweep: tuple[tuple[str, tuple[str, ...]], ...] = ()
    throttle_only: int | None = None


@dataclass(frozen=True)
class ArrayPlan:
    """The array a job is: ``#SBATCH --array=<spec>``, its indices, and a sweep's values per task."""

    spec: str
    indices: tuple[int, ...]
    throttle: int | None
    keys: tuple[str, ...] = ()                      # sweep keys, in the order given
    values: tuple[tuple[str, ...], ...] = ()        # per task (indices[i]), one value per key

    @property
    def size(self) -> int:
        return len(self.indices)

    def task_values(self, index: int) -> dict[str, str]:
        """The sweep's values for task ``index`` (empty without a sweep)."""
        if not self.keys:
            return {}
        return dict(zip(self.keys, self.values[self.indices.index(index)], strict=True))

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "indices": list(self.indices), "throttle": self.throttle,
                "sweep_keys": list(self.keys), "sweep_values": [list(v) for v in self.values]}


def env_name(key: str) -> str:
    """The environment variable a task finds sweep key ``key``'s value in."""
    return f"CK_SWEEP_{key.upper()}"


def parse_spec(text: str) -> ArraySpec:
    """Slurm's ``--array`` syntax: ``0-15``, ``1,3,5``, ``0-30:10``, each with an optional
    ``%N`` throttle at the end; InputError (field ``array``) naming what is wrong."""
    shown = repr(text[:80])
    body, pct, limit = text.partition("%")
    throttle = None
    if pct:
        if not re.fullmatch(r"[0-9]{1,7}", limit) or int(limit) < 1:
            raise InputError("the throttle after '%' must be a whole number of at least 1 (0-15%4: at most 4 "
                             "tasks at once)", field="array", value=shown)
        throttle = int(limit)
    if not body:
        raise InputError("give the task indices, e.g. 0-15 or 1,3,5 (with %N: at most N at once)",
                         field="array", value=shown)
    ranges: list[range] = []
    count = 0
    for item in body.split(","):
        m = _ITEM.fullmatch(item)
        if m is None:
            raise InputError(f"{item[:40]!r} is not an index, a range N-M or a stepped range N-M:S (Slurm's "
                             "syntax, e.g. 0-15%4)", field="array", value=shown)
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first or step < 1:
            raise InputError(f"the range {item!r} is empty (N-M needs M >= N, a step at least 1)",
                             field="array", value=shown)
        if last >= SLURM_MAX_ARRAY_SIZE:
            raise InputError(f"index {last} is past Slurm's largest array index ({SLURM_MAX_ARRAY_SIZE - 1})",
                             field="array", value=shown)
        count += (last - first) // step + 1
        if count > SLURM_MAX_ARRAY_SIZE:
            raise InputError(f"more than {SLURM_MAX_ARRAY_SIZE} tasks", field="array", value=shown)
        ranges.append(range(first, last + 1, step))
    spec = ArraySpec(text, tuple(ranges), throttle)
    if count <= MAX_CHECKED_NOW:
        spec.indices()   # an index listed twice: said now; a larger array, once its size is known to fit
    return spec


def parse_sweep(items: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``KEY=V1,V2,...`` items (``--sweep``, repeatable): the keys in order, each with its values."""
    out: list[tuple[str, tuple[str, ...]]] = []
    seen: dict[str, str] = {}
    for item in items:
        shown = repr(item[:80])
        key, eq, rest = item.partition("=")
        if not eq or not _KEY.fullmatch(key):
            raise InputError("give KEY=V1,V2,... with KEY a letter then letters, digits or '_' (at most 32), "
                             "e.g. lr=0.1,0.01", field="sweep", value=shown)
        if key.upper() in seen:
            raise InputError(f"the key {key!r} is swept twice (as {seen[key.upper()]!r} before; "
                             f"both would be {env_name(key)})", field="sweep", value=shown)
        values = tuple(rest.split(","))
        if any(v == "" for v in values):
            raise InputError("a value is empty (values are separated by ',')", field="sweep", value=shown)
        if any(_BAD_VALUE.search(v) for v in values):
            raise InputError("control characters are not allowed in a value", field="sweep", value=shown)
        if len(set(values)) != len(values):
            raise InputError("a value is listed twice", field="sweep", value=shown)
        seen[key.upper()] = key
        out.append((key, values))
    return tuple(out)


def request(array: str | None, sweep: Sequence[str]) -> ArrayRequest | None:
    """The array the options ask for, checked (None: an ordinary job)."""
    if array is None and not sweep:
        return None
    keys = parse_sweep(sweep)
    if array is not None and keys:
        m = re.fullmatch(r"%([0-9]{1,7})", array)
        if m is None or int(m.group(1)) < 1:
            raise InputError("with --sweep the sweep makes the tasks: give only a throttle, e.g. --array %4",
                             field="array", value=repr(array[:80]))
        return ArrayRequest(sweep=keys, throttle_only=int(m.group(1)))
    return ArrayRequest(spec=parse_spec(array) if array is not None else None, sweep=keys)


def plan(ask: ArrayRequest, *, slurm: bool, site: str, max_array_size: int | None) -> ArrayPlan:
    """The array of ``ask`` on a site: a sweep's product numbered 0..N-1; refused where an index
    reaches the site's ``max_array_size`` (Slurm's MaxArraySize).  On a local site (``slurm``
    false) the one job script runs the tasks one after another (``templates/job-sweep.local.j2``)."""
    if ask.sweep:
        keys = tuple(k for k, _ in ask.sweep)
        size = 1
        for _, vals in ask.sweep:
            size *= len(vals)
        if size > MAX_SWEEP_TASKS:
            raise PlanError(f"the sweep makes {size} tasks, more than {MAX_SWEEP_TASKS}: split it", field="sweep")
        values = tuple(itertools.product(*(vals for _, vals in ask.sweep)))
        throttle = ask.throttle_only
        text = f"0-{size - 1}" + (f"%{throttle}" if throttle else "")
        out = ArrayPlan(text, tuple(range(size)), throttle, keys, values)
    else:
        assert ask.spec is not None
        # Slurm's MaxArraySize; a local site runs the tasks one after another, as many as a sweep may have
        limit, where = ((MAX_SWEEP_TASKS, "a local site's limit") if not slurm else
                        (max_array_size, "the site's scheduler.max_array_size") if max_array_size is not None else
                        (DEFAULT_MAX_ARRAY_SIZE, "Slurm's default; a cluster that allows more: set the site's "
                                                 "scheduler.max_array_size"))
        if ask.spec.top >= limit:   # before a single index is built: 0-4000000 would be 4 million
            raise PlanError(f"largest index {ask.spec.top} past MaxArraySize {limit} ({where}): the largest index "
                            "must be below it; split the array, or ask the cluster's admins", field="array",
                            value=repr(ask.spec.text[:80]))
        out = ArrayPlan(ask.spec.text, ask.spec.indices(), ask.spec.throttle)
    if max_array_size is not None and slurm:
        check_size(out, max_array_size, "the site's scheduler.max_array_size")
    return out


def check_size(arr: ArrayPlan, max_array_size: int, where: str) -> None:
    """Refuse an array Slurm would refuse: its largest index must be below MaxArraySize."""
    top = arr.indices[-1]
    if top >= max_array_size:
        what = f"{arr.size} tasks" if arr.keys else f"largest index {top}"
        raise PlanError(f"{what} past MaxArraySize {max_array_size} ({where}): the largest index must be below "
                        f"it; split the array, or ask the cluster's admins", field="sweep" if arr.keys else "array",
                        value=repr(arr.spec))


def command_words(command: Sequence[str], keys: Sequence[str]) -> list[str]:
    """The training command as shell words: each ``{KEY}`` of a swept key becomes
    ``"${CK_SWEEP_KEY}"`` (a double-quoted expansion: its value is data), the rest shell-quoted."""
    if not keys:
        return [shlex.quote(w) for w in command]
    pattern = re.compile("|".join(re.escape("{" + k + "}") for k in sorted(keys, key=len, reverse=True)))
    out = []
    for word in command:
        parts: list[str] = []
        pos = 0
        for m in pattern.finditer(word):
            if m.start() > pos:
                parts.append(shlex.quote(word[pos:m.start()]))
            parts.append('"${' + env_name(m.group(0)[1:-1]) + '}"')
            pos = m.end()
        if pos < len(word) or not parts:
            parts.append(shlex.quote(word[pos:]))
        out.append("".join(parts))
    return out


def case_lines(arr: ArrayPlan) -> list[str]:
    """``INDEX) export CK_SWEEP_A='v' CK_SWEEP_B='w' ;;`` for each task of a sweep (none without one)."""
    if not arr.keys:
        return []
    return [f"{i}) export " + " ".join(f"{env_name(k)}={shlex.quote(v)}" for k, v in zip(arr.keys, vals, strict=True))
            + " ;;" for i, vals in zip(arr.indices, arr.values, strict=True)]
