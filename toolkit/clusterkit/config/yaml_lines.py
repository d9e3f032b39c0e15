"""Site YAML read with the line of every key, within fixed limits.

Site files are shared (./site_configs, /etc/clusterkit/sites) and `sites list` loads every one
on the search path, so one hostile file must fail fast and alone: each limit below is checked
before the work it bounds.  Only plain data is read (core YAML tags, merge keys, anchors).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clusterkit.errors import ConfigError, ConfigIssue

# --------------------------------------------------------------------------------------------
# YAML with line numbers, bounded
#
# Site files are shared (./site_configs, /etc/clusterkit/sites) and `sites list` loads every one
# on the search path, so one hostile file must fail fast and alone: each limit below is checked
# before the work it bounds.

#: Largest site file read, in bytes.
MAX_FILE_BYTES = 1024 * 1024
#: Most YAML aliases (``*name``) in one file; a handful of them can expand a 400-byte file into gigabytes.
MAX_ALIASES = 100
#: Deepest nesting of mappings and sequences (real site files use four or five levels).
MAX_DEPTH = 64
#: Most values one file may expand to once aliases and merge keys are followed.
MAX_VALUES = 10_000

KeyPath = tuple[str | int, ...]

_CORE_TAGS = {f"tag:yaml.org,2002:{t}"
              for t in ("null", "bool", "int", "float", "str", "map", "seq", "merge", "timestamp")}
_MERGE_TAG = "tag:yaml.org,2002:merge"
_EventLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class Doc:
    data: Any
    lines: dict[KeyPath, tuple[str, int]]  # key path -> (file, 1-based line)
    raw: dict[KeyPath, str] = field(default_factory=dict)  # key path -> a plain scalar's source text


def _yaml_error(exc: yaml.YAMLError, file: str) -> ConfigError:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        return ConfigError.single(file, line, "", f"invalid YAML: {exc.problem or exc.context}")
    return ConfigError.single(file, None, "", f"invalid YAML: {exc}")


def _line(event: Any) -> int | None:
    mark = event.start_mark
    return mark.line + 1 if mark else None


def _check_shape(text: str, file: str) -> None:
    """Count aliases and nesting on the event stream (flat, no recursion) before composing."""
    depth = aliases = 0
    try:
        for event in yaml.parse(text, Loader=_EventLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ConfigError.single(file, _line(event), "",
                                             f"nesting deeper than {MAX_DEPTH} levels (the limit)")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise ConfigError.single(file, _line(event), "",
                                             f"more than {MAX_ALIASES} YAML aliases (the limit)")
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):
            # libyaml >= 0.2.5 stops at 1,000 levels while scanning ahead, before the events
            # above reach ours: the same verdict, in the same words
            mark = getattr(exc, "problem_mark", None)
            raise ConfigError.single(file, mark.line + 1 if mark is not None else None, "",
                                     f"nesting deeper than {MAX_DEPTH} levels (the limit)") from None
        raise _yaml_error(exc, file) from None


def _compose(text: str, file: str) -> Any:
    _check_shape(text, file)
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, file) from None


class _Builder:
    """Turn a composed YAML node into plain data, recording the line of every key path.

    Aliases share nodes, so the builder follows them with a budget (``MAX_VALUES``), a depth
    limit and a guard against an alias inside its own anchor."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.lines: dict[KeyPath, tuple[str, int]] = {}
        self.raw: dict[KeyPath, str] = {}
        self.issues: list[ConfigIssue] = []
        self.values = 0
        self.open: set[int] = set()
        self.constructor = yaml.SafeLoader("")

    def _fail(self, node: Any, path: KeyPath, message: str) -> ConfigError:
        return ConfigError.single(self.file, node.start_mark.line + 1, dotted(path), message)

    def build(self, node: Any, path: KeyPath) -> Any:
        self.values += 1
        if self.values > MAX_VALUES:
            raise self._fail(node, path, f"expands to more than {MAX_VALUES} values (the limit; check the aliases)")
        if len(path) > MAX_DEPTH:
            raise self._fail(node, path, f"nesting deeper than {MAX_DEPTH} levels (the limit)")
        if node.tag not in _CORE_TAGS:
            raise self._fail(node, path, f"unsupported YAML tag {node.tag!r}: site files are plain data")
        self.lines.setdefault(path, (self.file, node.start_mark.line + 1))
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        if id(node) in self.open:
            raise self._fail(node, path, "recursive YAML alias (an alias inside its own anchor)")
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self.mapping(node, path)
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def scalar(self, node: Any, path: KeyPath) -> Any:
        if node.style is None:
            self.raw[path] = node.value
        try:
            return self.constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError):
            raise self._fail(node, path, f"{node.value!r} is not a valid {node.tag.rsplit(':', 1)[-1]}") from None

    def key(self, node: Any, path: KeyPath) -> Any:
        if not isinstance(node, yaml.ScalarNode) or node.tag not in _CORE_TAGS:
            return None
        try:
            return self.constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError):
            raise self._fail(node, path, f"key {node.value!r} is not a valid {node.tag.rsplit(':', 1)[-1]}") from None

    def mapping(self, node: Any, path: KeyPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        merged: list[Any] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged.append(value_node)
                continue
            key = self.key(key_node, path)
            if not isinstance(key, str):
                self.issues.append(ConfigIssue(self.file, key_node.start_mark.line + 1, dotted(path),
                                               f"key {key!r} must be a string"))
                continue
            if key in out:
                self.issues.append(ConfigIssue(self.file, key_node.start_mark.line + 1, dotted((*path, key)),
                                               "duplicate key"))
                continue
            self.lines[(*path, key)] = (self.file, key_node.start_mark.line + 1)
            out[key] = self.build(value_node, (*path, key))
        for value_node in merged:
            self.merge(value_node, path, out)
        return out

    def merge(self, value_node: Any, path: KeyPath, out: dict[str, Any]) -> None:
        """``<<: *defaults`` (or a list of them): keys set explicitly, or by an earlier source, win."""
        sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                raise self._fail(source, path, "a merge key '<<' takes a mapping or a list of mappings")
            built = self.build(source, (*path, "<<"))
            for key, value in built.items():
                if key not in out:
                    out[key] = value
                    self._move((*path, "<<", key), (*path, key))
        self._drop((*path, "<<"))

    def _move(self, src: KeyPath, dst: KeyPath) -> None:
        n = len(src)
        tables: tuple[dict[KeyPath, Any], ...] = (self.lines, self.raw)
        for table in tables:
            for p in [p for p in table if p[:n] == src]:
                table[dst + p[n:]] = table[p]

    def _drop(self, prefix: KeyPath) -> None:
        n = len(prefix)
        for table in (self.lines, self.raw):
            for p in [p for p in table if p[:n] == prefix]:
                del table[p]


def dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _read_text(file: Path, shown: str) -> str:
    """The file's text: a regular file (a FIFO would block, /dev/zero never end) of at most MAX_FILE_BYTES."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ConfigError.single(shown, None, "", "no such file") from None
    except OSError as exc:
        raise ConfigError.single(shown, None, "", f"cannot read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError.single(shown, None, "", "not a regular file")
        data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError.single(shown, None, "",
                                 f"larger than {MAX_FILE_BYTES // 1024} KiB (the limit for a site file)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError.single(shown, None, "", f"not UTF-8 text (byte {exc.start})") from None


def read_doc(file: Path) -> Doc:
    shown = display(file)
    node = _compose(_read_text(file, shown), shown)
    if node is None:
        raise ConfigError.single(shown, 1, "", "empty site config")
    builder = _Builder(shown)
    data = builder.build(node, ())
    if builder.issues:
        raise ConfigError(builder.issues)
    if not isinstance(data, dict):
        raise ConfigError.single(shown, 1, "", "a site config must be a mapping of keys (name:, nodes:, ...)")
    # top-level 'x-' keys hold YAML anchors for merge keys (the docker compose convention)
    data = {k: v for k, v in data.items() if not k.startswith("x-")}
    return Doc(data, builder.lines, builder.raw)


def display(file: Path) -> str:
    try:
        return str(file.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(file)
