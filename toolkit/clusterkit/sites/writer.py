"""``sites drift --write``: put live facts into the named site file, changing nothing else.

ruamel.yaml composes the file (nodes with exact character positions, merge keys and
comments left as they are); each edit replaces one value's characters, or inserts one key
line, so every line it does not change stays byte-identical.  A key the file inherits (from
``extends:`` or a merge key) gets its own line in the named file, so the parent is never
touched.  The result is validated with the same loader as every site before it replaces the
file (temp file + rename).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from clusterkit import hostlist
from clusterkit.errors import ConfigError

# The facts --write may set; requirements (driver_min, port_rate_gbps) are never written.
FACT_KEYS: dict[str, tuple[str, str]] = {
    "nodelist": ("nodes", "nodelist"), "gpus_per_node": ("nodes", "gpus_per_node"),
    "gpu_model": ("nodes", "gpu_model"), "cpus_per_node": ("nodes", "cpus_per_node"),
    "mem_gb": ("nodes", "mem_gb"), "hcas": ("network", "hcas"),
}


@dataclass(frozen=True)
class Edit:
    section: str
    key: str
    value: Any


def plan_edits(site: Any, live: Mapping[str, Any]) -> list[Edit]:
    """The fact edits that change something (a nodelist is compared as a set of hosts)."""
    edits: list[Edit] = []
    for name, (section, key) in FACT_KEYS.items():
        if name not in live:
            continue
        current = getattr(getattr(site, section), key)
        new = live[name]
        same = (set(hostlist.expand(new)) == set(site.nodes.hosts)) if name == "nodelist" else current == new
        if not same:
            edits.append(Edit(section, key, new))
    return edits


def _scalar(value: Any, style: str | None = None) -> str:
    if isinstance(value, bool) or not isinstance(value, str):
        return json.dumps(value)
    if style == "'" and "'" not in value:
        return f"'{value}'"
    plain_ok = re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", value) and yaml.safe_load(value) == value
    return value if plain_ok and style != '"' else json.dumps(value)


def _flow(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    return _scalar(value)


def _find(mapping: MappingNode, key: str) -> tuple[Node, Node] | None:
    for k, v in mapping.value:
        if isinstance(k, ScalarNode) and k.tag != "tag:yaml.org,2002:merge" and k.value == key:
            return k, v
    return None


def _last_end(node: Node) -> int:
    if isinstance(node, (MappingNode, SequenceNode)) and node.value and not node.flow_style:
        last = node.value[-1]
        return _last_end(last[1] if isinstance(last, tuple) else last)
    return int(node.end_mark.index)


def _replace(text: str, node: Node, value: Any) -> str:
    start, end = node.start_mark.index, node.end_mark.index
    if isinstance(node, SequenceNode) and not node.flow_style and node.value:
        start = text.rfind("-", 0, node.value[0].start_mark.index)
        indent = " " * (start - (text.rfind("\n", 0, start) + 1))  # the first dash's column
        body = f"\n{indent}".join(f"- {_scalar(v)}" for v in value)
        return text[:start] + body + text[_last_end(node):]
    new = _flow(value) if isinstance(value, list) else _scalar(value, getattr(node, "style", None))
    return text[:start] + new + text[end:]


def _insert(text: str, mapping: MappingNode, key: str, value: Any) -> str:
    if mapping.flow_style:
        at = _last_end(mapping.value[-1][1]) if mapping.value else mapping.start_mark.index + 1
        sep = ", " if mapping.value else ""
        return text[:at] + f"{sep}{key}: {_flow(value)}" + text[at:]
    indent = " " * mapping.value[0][0].start_mark.column
    eol = text.find("\n", _last_end(mapping))
    at = len(text) if eol < 0 else eol + 1
    prefix = "" if at == 0 or text[at - 1] == "\n" else "\n"
    return text[:at] + f"{prefix}{indent}{key}: {_flow(value)}\n" + text[at:]


def apply_edit(text: str, edit: Edit) -> str:
    """One edit, by character positions in the composed document."""
    root = YAML(typ="rt").compose(text)
    if not isinstance(root, MappingNode):
        raise ValueError("a site file is a mapping")  # validated before we get here
    hit = _find(root, edit.section)
    if hit is None:
        tail = "" if text.endswith("\n") or not text else "\n"
        return text + f"{tail}{edit.section}:\n  {edit.key}: {_flow(edit.value)}\n"
    section = hit[1]
    if not isinstance(section, MappingNode):
        raise ValueError(f"{edit.section} is not a mapping")
    own = _find(section, edit.key)
    if own is not None:
        return _replace(text, own[1], edit.value)
    return _insert(text, section, edit.key, edit.value)


def apply_edits(text: str, edits: list[Edit]) -> str:
    for e in edits:
        text = apply_edit(text, e)
    return text


def unified_diff(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{path}", tofile=f"b/{path}"))


def write_validated(path: Path, text: str) -> None:
    """Validate ``text`` as the site at ``path`` (same directory: extends resolves) and rename it in."""
    from clusterkit.config.load import load_file

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".yaml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        try:
            load_file(tmp)
        except ConfigError as exc:
            raise ConfigError.single(str(path), None, "",
                                     f"--write would make the site invalid: {exc.lines()[0]}") from None
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
