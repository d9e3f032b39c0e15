"""The shapes :func:`clusterkit.api.job_request` accepts, checked before anything uses them: a
caller's wrong type (an int for a list, a list for a name) is an :class:`InputError` naming the
field, never a ``TypeError`` from deep inside; text must be UTF-8 (a ``surrogateescape`` string
from a non-UTF-8 ``argv`` byte cannot be written to a job script) and a command word holds no NUL."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from clusterkit.config import job_options
from clusterkit.errors import InputError
from clusterkit.job.request import EnvEntry

StrPath = str | os.PathLike[str]

#: field -> the shapes it takes (:data:`clusterkit.config.job_options.SHAPES`): "text", "words" (a
#: list of strings), "map" (str -> str|bool|None), "anymap" (str -> any value: settings), "path",
#: "paths", "bool"
SHAPES: dict[str, tuple[str, ...]] = job_options.SHAPES
_WORDED = {"text": "a string", "words": "a list of strings", "map": "a mapping of strings",
           "anymap": "a mapping of names to values", "path": "a path", "paths": "a list of paths",
           "bool": "True or False"}


def _is(shape: str, v: Any) -> bool:
    if shape == "text":
        return isinstance(v, str)
    if shape == "bool":
        return isinstance(v, bool)
    if shape == "path":
        return isinstance(v, (str, os.PathLike))
    if shape in ("words", "paths"):
        return (isinstance(v, Sequence) and not isinstance(v, (str, bytes))
                and all(_is("text" if shape == "words" else "path", w) for w in v))
    return isinstance(v, Mapping) and all(isinstance(k, str) for k in v)   # map, anymap


def _utf8(field: str, value: Any, depth: int = 0) -> None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError("is not valid UTF-8 text (a byte the locale could not decode)", field=field,
                             value=ascii(value)[:80]) from None
    elif isinstance(value, os.PathLike):
        _utf8(field, os.fspath(value), depth)
    elif depth < 4 and isinstance(value, Mapping):
        for k, v in value.items():
            _utf8(field, k, depth + 1)
            _utf8(field, v, depth + 1)
    elif depth < 4 and isinstance(value, (list, tuple)):
        for v in value:
            _utf8(field, v, depth + 1)


def check(command: Any, fields: Mapping[str, Any]) -> None:
    """InputError for the first input of a wrong shape or not UTF-8; a NUL in a command word."""
    for name, value in fields.items():
        shapes = SHAPES.get(name)
        if value is None or name == "command":
            continue
        if shapes is not None and not any(_is(s, value) for s in shapes):
            wanted = " or ".join(_WORDED[s] for s in shapes)
            raise InputError(f"give {wanted}, not {type(value).__name__}", field=name)
        _utf8(name, value)
    if command is not None and not _is("words", command):   # None: a request with no command (preflight's)
        raise InputError(f"give a list of strings (the program and its arguments), not {type(command).__name__}",
                         field="command")
    if isinstance(command, (list, tuple)):
        for word in command:
            if isinstance(word, str) and "\0" in word:
                raise InputError("a word holds a NUL byte", field="command", value=ascii(word)[:80])
        _utf8("command", command)


def words(name: str, given: Sequence[str] | None) -> tuple[str, ...]:
    if given is None:
        return ()
    for word in given:   # a list of strings: api.inputs.check
        if "\0" in word or not word.strip():
            raise InputError("must be non-empty text without NUL bytes" if word.strip() else "is empty",
                             field=name, value=repr(word[:60]))
    return tuple(given)


def text(name: str, given: str | None) -> str | None:
    if given is not None and (not isinstance(given, str) or not given or "\0" in given):
        raise InputError("give a non-empty string without NUL bytes", field=name, value=repr(given))
    return given


def env(given: Mapping[str, str] | Sequence[str] | None) -> tuple[EnvEntry, ...]:
    from clusterkit.job import jobenv

    if given is None:
        return ()
    if isinstance(given, Mapping):
        out = []
        for name, value in given.items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise InputError("give names and values as strings", field="env", value=repr(name))
            jobenv.check_entry(name, value, field="env")
            out.append(EnvEntry(name, value, "--env"))
        return tuple(out)
    return jobenv.parse_pairs(words("env", given))


def env_files(given: StrPath | Sequence[StrPath] | None) -> tuple[EnvEntry, ...]:
    """Each env file's entries, in order; read here (regular files only, bounded)."""
    from clusterkit import safefile
    from clusterkit.job import jobenv

    if given is None:
        return ()
    paths = [given] if isinstance(given, (str, os.PathLike)) else list(given)
    out: list[EnvEntry] = []
    for path in paths:
        shown = os.fspath(path)
        try:
            data, more = safefile.read_capped(path, jobenv.MAX_ENV_FILE_BYTES)
        except OSError as exc:
            raise InputError(f"cannot read it: {exc.strerror or exc}", field="env_file", value=shown) from None
        if more:
            raise InputError(f"larger than {jobenv.MAX_ENV_FILE_BYTES // (1024 * 1024)} MiB", field="env_file",
                             value=shown)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[:exc.start].count(b"\n") + 1
            raise InputError("is not UTF-8 text", field="env_file", value=f"{shown}:{line}") from None
        out += jobenv.parse_file(text, shown)
    return tuple(out)


def sbatch(given: Mapping[str, str | bool | None] | Sequence[str] | None) -> tuple[tuple[str, str | None], ...]:
    """``KEY[=VALUE]`` options as (key, value or None); which keys Slurm takes is checked in the plan."""
    if given is None:
        return ()
    out: list[tuple[str, str | None]] = []
    items: list[tuple[str, str | bool | None]]
    if isinstance(given, Mapping):
        items = list(given.items())
    else:
        items = []
        for word in words("sbatch", given):
            name, sep, text = word.partition("=")
            items.append((name, text if sep else None))
    for key, value in items:
        if not isinstance(key, str) or not re.fullmatch(r"[a-z][a-z0-9-]*", key.removeprefix("--")):
            raise InputError("write KEY[=VALUE] with a Slurm long option name, e.g. constraint=a100",
                             field="sbatch", value=repr(key))
        if value is False:
            continue
        if value is not None and value is not True and not isinstance(value, str):
            raise InputError("give the value as a string", field="sbatch", value=repr(key))
        out.append((key.removeprefix("--"), None if value is None or value is True else value))
    return tuple(out)


def of(field: str, value: Any, shape: str) -> Any:
    """``value`` if it has ``shape`` (see :data:`SHAPES`) and its text is UTF-8; InputError otherwise."""
    if not _is(shape, value):
        raise InputError(f"give {_WORDED[shape]}, not {type(value).__name__}", field=field)
    _utf8(field, value)
    if shape == "path" and "\0" in os.fspath(value):
        raise InputError("a path cannot hold a NUL byte", field=field, value=ascii(os.fspath(value))[:80])
    return value


def instance(field: str, value: Any, kind: type, wanted: str) -> Any:
    if not isinstance(value, kind):
        raise InputError(f"give {wanted}, not {type(value).__name__}", field=field)
    return value


def count(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"give a whole number, not {type(value).__name__}", field=field, value=repr(value)[:40])
    return value
