"""Slurm's text, read once: ``Key=Value`` records as scontrol prints them, Slurm times as
Slurm prints them, ``EXIT:SIGNAL`` pairs, and the words a client prints when slurmctld does
not answer.  Pure and total: nothing here runs a command or raises on what Slurm printed.

The grammar of a Slurm time is :func:`clusterkit.vocab.slurm_time_seconds` (one parser): here it
reads Slurm's output leniently (``UNLIMITED``, surrounding blanks), there it validates input.
"""

from __future__ import annotations

import math
import re

from clusterkit.vocab import slurm_time_seconds

# What Slurm clients print when slurmctld is down or unreachable (sbatch after its own retries)
UNREACHABLE = re.compile(r"Unable to contact slurm controller|Could not establish a configuration source"
                         r"|Unable to process configuration file|Connection refused", re.I)

# a field starts at the line's start or after blanks, with a key: scontrol's keys start upper-case
_KEY = re.compile(r"(?:^|\s+)([A-Z][A-Za-z0-9_/:.]*)=")
# Fields whose values are free text with blanks of their own (node, job and partition records):
# ``OS=Linux 6.8.0 #1 SMP``, ``Reason=bad gpu [root@2024-05-01T10:00:00]``, ``WorkDir=/home/a b``.
FREE_TEXT = frozenset({"OS", "Reason", "Comment", "Extra", "AdminComment", "SystemComment", "WorkDir",
                       "Command", "StdErr", "StdIn", "StdOut", "JobName", "Name"})
_SEARCH_BUDGET = 20_000  # steps of the search per line before the plain reading is used


class _TooHard(Exception):
    pass


def split_record(line: str) -> dict[str, str]:
    """One ``scontrol -o show node|partition|job`` record -> ``{key: value}``, field by field.

    scontrol prints each field of a record once, ``Key=value`` after a blank, and the values of
    :data:`FREE_TEXT` fields may hold blanks and ``Key=`` words of their own.  So the record is
    read as Slurm wrote it: a field other than a free-text one ends at the next ``Key=``; a
    free-text one ends at a ``Key=`` of its choosing; no key may come twice.  Of the readings
    that fit, the one with the most fields wins, and among those the one whose earlier free text
    is shortest.  Free text that spells ``JobState=FAILED`` or ``RealMemory=1`` therefore stays
    in its own value (reading it as a field would leave a field Slurm printed twice, or lose
    others) and never replaces the field Slurm printed.  The limit of ``-o`` output: free text
    that repeats every field up to a later free-text key reads the same as Slurm's own fields.

    A line no reading fits (a free-text field this module does not know, holding a ``Key=`` seen
    before) or too tangled to search within the budget is read plainly, keeping only the keys
    that occur once: a field that cannot be told from a copy is left out, never guessed.
    """
    found = list(_KEY.finditer(line))
    keys = [m.group(1) for m in found]
    try:
        ends = _best_split(keys)
    except _TooHard:
        ends = None
    if ends is None:
        once = {k for k in keys if keys.count(k) == 1}
        return {m.group(1): line[m.end():nxt.start() if nxt else len(line)].strip()
                for m, nxt in zip(found, [*found[1:], None], strict=True) if m.group(1) in once}
    fields: dict[str, str] = {}
    start = 0
    for end in ends:
        m = found[start]
        fields[m.group(1)] = line[m.end():found[end].start() if end < len(found) else len(line)].strip()
        start = end
    return fields


def _best_split(keys: list[str]) -> tuple[int, ...] | None:
    """Where each field ends (index of the next field's key, or len(keys)), or None if no
    reading fits.  Readings are memoized on what can still collide (the keys seen so far that
    occur again later), and searched within a budget: hostile text cannot make it take long."""
    n = len(keys)
    last_at = {key: i for i, key in enumerate(keys)}
    budget = [_SEARCH_BUDGET]
    memo: dict[tuple[int, frozenset[str]], tuple[int, tuple[int, ...]] | None] = {}

    def best(i: int, seen: frozenset[str]) -> tuple[int, tuple[int, ...]] | None:
        state = (i, frozenset(k for k in seen if last_at[k] >= i))
        if state not in memo:
            budget[0] -= 1
            if budget[0] < 0:
                raise _TooHard
            memo[state] = _from(i, state[1])
        return memo[state]

    def _from(i: int, seen: frozenset[str]) -> tuple[int, tuple[int, ...]] | None:
        ends: list[int] = []
        while i < n and keys[i] not in FREE_TEXT:  # plain fields end at the next key
            if keys[i] in seen:
                return None
            seen = seen | {keys[i]}
            i += 1
            ends.append(i)
        if i == n:
            return len(ends), tuple(ends)
        if keys[i] in seen:
            return None
        seen = seen | {keys[i]}
        found: tuple[int, tuple[int, ...]] | None = None
        for j in range(i + 1, n + 1):  # a free-text field: try each end, the nearest first
            if found is not None and 1 + (n - j) <= found[0]:
                break  # no later end can read more fields
            if j < n and keys[j] in seen:
                continue
            budget[0] -= 1
            rest = best(j, seen)
            if rest is not None and (found is None or rest[0] + 1 > found[0]):
                found = (rest[0] + 1, (j, *rest[1]))  # ties: the nearer end (shorter free text)
        return None if found is None else (len(ends) + found[0], (*ends, *found[1]))

    result = best(0, frozenset())
    return None if result is None else result[1]


def parse_time(text: str) -> float | None:
    """A Slurm time limit as Slurm prints it, in seconds; ``math.inf`` for UNLIMITED/INFINITE;
    None when unreadable (``NONE``, garbage)."""
    t = (text or "").strip()
    if t.upper() in ("UNLIMITED", "INFINITE"):
        return math.inf
    seconds = slurm_time_seconds(t)
    return None if seconds is None else float(seconds)


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """Slurm's ``EXIT:SIGNAL`` (``3:0``, ``0:15``) -> (3, None) / (None, 15)."""
    m = re.fullmatch(r"\s*([0-9]{1,9}):([0-9]{1,9})\s*", text or "")
    if not m:
        return None, None
    code, sig = int(m.group(1)), int(m.group(2))
    return (None, sig) if sig else (code, None)


def lines(text: str) -> list[str]:
    """Slurm's output split into its lines: at newlines only (``\\r\\n`` too), never at the
    characters ``str.splitlines`` also splits at (``\\x1c``, ``\\x85``, U+2028, a lone ``\\r``),
    which free text (a node's Reason, a job's name) may hold: they would start a record."""
    return [ln[:-1] if ln.endswith("\r") else ln for ln in (text or "").split("\n")]


def last_line(text: str) -> str:
    """The last non-blank line of a client's message (its own verdict), stripped."""
    found = [ln.strip() for ln in lines((text or "").strip()) if ln.strip()]
    return found[-1] if found else "(no message)"
