"""The job's own environment as given: ``--env KEY=VALUE`` pairs and ``--env-file`` text.

Pure: the API reads an env file (bounded) and hands its text here.  An env file holds
``KEY=VALUE`` lines, blank lines and ``#`` comment lines; nothing in it is shell (no quotes
removed, no ``export``, no ``$VAR`` or ``$(...)``), so what is written is what the job gets.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from clusterkit.config.envrules import ANY_REF, ENV_REF, job_env_problem
from clusterkit.errors import InputError
from clusterkit.job.request import EnvEntry

_PLAIN_PATH = re.compile(r"[\w./+@:,~-]{1,4096}", re.ASCII)
#: Linux refuses one ``NAME=value`` string longer than this in exec (MAX_ARG_STRLEN, 32 pages).
MAX_ENV_STRING = 32 * 4096 - 1
#: An env file larger than this is refused before it is parsed.
MAX_ENV_FILE_BYTES = 4 * 1024 * 1024


def check_entry(name: str, value: str, *, field: str, where: str | None = None) -> None:
    """A name and value any process can be given, else an :class:`InputError` at ``field``
    (``where`` names the place, ``vars.env:3``, instead of the value)."""
    shown = where if where is not None else repr(f"{name}={value}"[:60])
    problem = job_env_problem(name, value, site=False)
    if problem:
        raise InputError(problem, field=field, value=shown)
    if len(name) + 1 + len(value.encode("utf-8", "surrogateescape")) > MAX_ENV_STRING:
        raise InputError(f"{name}=...: longer than {MAX_ENV_STRING} bytes, which Linux refuses to pass to a "
                         "process (MAX_ARG_STRLEN); put large values in a file and pass its path",
                         field=field, value=shown)


def parse_pair(text: str, *, field: str = "env", origin: str = "--env") -> EnvEntry:
    """``KEY=VALUE`` (the value may hold ``=``; it is taken literally)."""
    name, sep, value = text.partition("=")
    if not sep:
        raise InputError("write KEY=VALUE", field=field, value=repr(text[:60]))
    check_entry(name, value, field=field)
    return EnvEntry(name, value, origin)


def parse_pairs(pairs: Iterable[str], *, field: str = "env", origin: str = "--env") -> tuple[EnvEntry, ...]:
    return tuple(parse_pair(p, field=field, origin=origin) for p in pairs)


def parse_file(text: str, source: str, *, field: str = "env_file") -> tuple[EnvEntry, ...]:
    """The entries of an env file's ``text`` (``source`` names it in errors and origins:
    ``vars.env:3``)."""
    out: list[EnvEntry] = []
    if not _PLAIN_PATH.fullmatch(source):  # it is shown in comments of the rendered files
        source = ascii(source)
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        where = f"{source}:{number}"
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep:
            raise InputError(f"{stripped[:40]!r} is not KEY=VALUE", field=field, value=where)
        if name.startswith("export "):
            raise InputError("write KEY=VALUE without 'export': an env file is not a shell script",
                             field=field, value=where)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            raise InputError(f"{name}: values are taken literally, quotes included; write the value without "
                             "the quotes", field=field, value=where)
        check_entry(name, value, field=field, where=where)
        out.append(EnvEntry(name, value, f"--env-file {where}"))
    return tuple(out)


def refs(value: str) -> list[str]:
    """The ``${SLURM_*}``/``${CK_*}`` names ``value`` refers to (others are refused earlier)."""
    return [m.group(1) for m in ENV_REF.finditer(value)]


def literal_dollars(entries: Iterable[EnvEntry]) -> list[str]:
    """Warnings for ``$NAME`` words kept literally (only ``${SLURM_*}``, ``${CK_*}`` and the variable's
    own ``$NAME`` expand): ``$SLURM_JOB_ID`` without braces, ``$HOME``."""
    out = []
    for e in entries:
        kept = [m.group(0) for m in ANY_REF.finditer(e.value) if m.group(2) and m.group(2) != e.name]
        if kept:
            out.append(f"{e.origin} {e.name}: {kept[0]} is kept as written, not expanded (a value expands only "
                       f"${{SLURM_*}} and ${{CK_*}}, braces included, and ${e.name} itself)")
    return out


def shell_word(value: str, name: str = "") -> str:
    """``value`` as one shell word: literal text single-quoted, each ``${SLURM_*}``/``${CK_*}``
    reference left for the shell that runs it (each node's own), and ``$NAME``/``${NAME}`` of its
    own variable ``name`` (its value before); nothing else expanded."""
    parts: list[str] = []
    pos = 0
    for m in ANY_REF.finditer(value):
        ref = m.group(1) or m.group(2)
        if not (ENV_REF.fullmatch(m.group(0)) or (name and ref == name)):
            continue
        if m.start() > pos:
            parts.append(shlex.quote(value[pos:m.start()]))
        parts.append(f'"${{{ref}-}}"')   # unset: empty (the batch shell runs with set -u)
        pos = m.end()
    if pos < len(value) or not parts:
        parts.append(shlex.quote(value[pos:]))
    return "".join(parts)
