"""``sites drift --write``: put live facts into the named site file, changing nothing else.

ruamel.yaml composes the file (nodes with exact character positions, merge keys and
comments left as they are); each edit replaces one value's characters, or inserts one key
line, so every line it does not change stays byte-identical.  Every value is written by
ruamel.yaml's emitter (:func:`emit`), never pasted as text.  A key the file inherits from
``extends:`` gets its own line in the named file, so the parent is never touched; a key a
merge key (``<<: *anchor``) brings in is refused, never shadowed.  The edited text is read
back and must be the old document with exactly the edited values changed; it is validated
with the same loader as every site before it replaces the file (:func:`write_validated`:
mode, owner, hard links and CRLF line ends kept, synced before the rename).
"""

from __future__ import annotations

import difflib
import io
import os
import stat
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


def emit(value: Any, *, quoted: bool = False) -> str:
    """``value`` as YAML flow text, written by ruamel.yaml's emitter (quoting, escapes, non-BMP
    characters as themselves) and read back by the site loader's YAML (1.1: ``yes`` is a bool)
    as the same value; a string that would not come back (or any string, with ``quoted``) is
    written double-quoted."""
    text = _emit(_quoted(value) if quoted else value)
    if yaml.safe_load(f"[{text}]") != [value]:
        text = _emit(_quoted(value))
        if yaml.safe_load(f"[{text}]") != [value]:
            raise ConfigError.single("", None, "", f"cannot write {value!r} as YAML that reads back the same")
    return text


def _quoted(value: Any) -> Any:
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    if isinstance(value, str):
        return DoubleQuotedScalarString(value)
    if isinstance(value, list):
        return [_quoted(v) for v in value]
    return value


def _emit(value: Any) -> str:
    out = io.StringIO()
    emitter = YAML(typ="rt")
    emitter.default_flow_style = True
    emitter.width = 1 << 30  # one line, however long
    emitter.allow_unicode = True
    emitter.dump([value], out)
    text = out.getvalue().strip()
    if not (text.startswith("[") and text.endswith("]")) or "\n" in text:
        raise ConfigError.single("", None, "", f"cannot write {value!r} as one line of YAML")
    return text[1:-1]


def _scalar(value: Any, style: str | None = None) -> str:
    if isinstance(value, str) and style in ("'", '"'):  # keep the file's quoting where it can
        return _emit(_quoted(value)) if style == '"' else emit(value)
    return emit(value)


def _flow(value: Any) -> str:
    return emit(value)


_MERGE = "tag:yaml.org,2002:merge"


def _find(mapping: MappingNode, key: str) -> tuple[Node, Node] | None:
    for k, v in mapping.value:
        if isinstance(k, ScalarNode) and k.tag != _MERGE and k.value == key:
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


def _merged_from(mapping: MappingNode, key: str) -> Node | None:
    """The mapping a merge key (``<<: *anchor``) of ``mapping`` brings ``key`` in from, if any."""
    for k, v in mapping.value:
        if not (isinstance(k, ScalarNode) and k.tag == _MERGE):
            continue
        for source in (v.value if isinstance(v, SequenceNode) else [v]):
            if isinstance(source, MappingNode):
                if _find(source, key) is not None:
                    return source
                deeper = _merged_from(source, key)
                if deeper is not None:
                    return deeper
    return None


def _refuse_merged(where: str, source: Node) -> ConfigError:
    line = source.start_mark.line + 1
    return ConfigError.single("", None, where, f"comes from a merge key (the mapping at line {line}); --write "
                                               "never shadows it with a key of its own: edit that mapping by hand")


def apply_edit(text: str, edit: Edit) -> str:
    """One edit, by character positions in the composed document; a key that a merge key
    brings in is refused (a new key of the file's own would shadow it, and with it every
    other key of the merged mapping)."""
    root = YAML(typ="rt").compose(text)
    if not isinstance(root, MappingNode):
        raise ConfigError.single("", None, "", "a site file is a mapping")
    hit = _find(root, edit.section)
    if hit is None:
        merged = _merged_from(root, edit.section)
        if merged is not None:
            raise _refuse_merged(edit.section, merged)
        tail = "" if text.endswith("\n") or not text else "\n"
        return text + f"{tail}{edit.section}:\n  {edit.key}: {_flow(edit.value)}\n"
    section = hit[1]
    if not isinstance(section, MappingNode):
        raise ConfigError.single("", None, edit.section, "is not a mapping")
    own = _find(section, edit.key)
    if own is not None:
        return _replace(text, own[1], edit.value)
    merged = _merged_from(section, edit.key)
    if merged is not None:
        raise _refuse_merged(f"{edit.section}.{edit.key}", merged)
    return _insert(text, section, edit.key, edit.value)


def apply_edits(text: str, edits: list[Edit]) -> str:
    """The edits applied, then read back: the document must be the old one with exactly
    these values changed (nothing shadowed, nothing mis-quoted), or nothing is written."""
    new = text
    for e in edits:
        new = apply_edit(new, e)
    expected = yaml.safe_load(text)
    for e in edits:
        expected.setdefault(e.section, {})[e.key] = e.value
    got = yaml.safe_load(new)
    if got != expected:
        changed = sorted(f"{s}.{k}" for s in set(got) | set(expected) if isinstance(got.get(s), dict)
                         for k in set(got.get(s, {})) | set(expected.get(s) or {})
                         if got.get(s, {}).get(k) != (expected.get(s) or {}).get(k))
        raise ConfigError.single("", None, "", "--write would change more than the facts it sets"
                                 + (f" ({', '.join(changed[:5])})" if changed else "") + "; nothing written")
    return new


def unified_diff(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{path}", tofile=f"b/{path}"))


def read_site_text(path: Path) -> tuple[str, str]:
    """A site file's text with LF line ends, and the line end it uses (``\\r\\n`` or ``\\n``);
    a file that mixes both is refused (no rewrite could keep it as it is)."""
    text = path.read_bytes().decode("utf-8")
    crlf = text.count("\r\n")
    if crlf and crlf != text.count("\n"):
        raise ConfigError.single(str(path), None, "", "mixes CRLF and LF line ends; --write keeps a file's line "
                                                      "ends and cannot here: make them one kind first")
    return text.replace("\r\n", "\n"), "\r\n" if crlf else "\n"


def write_validated(path: Path, text: str, newline: str = "\n") -> None:
    """Replace the site at ``path`` with ``text`` (LF line ends; written with ``newline``),
    validated first as the site it would be, in a temp file beside it (``extends:`` resolves
    the same).  The file keeps its mode and owner, and its hard links: with other links, or an
    owner the rename could not keep, the verified text is written in place.  The temp file is
    synced before the rename and named ``.NAME.XXXX.ck-tmp`` (never taken for a site); it is
    removed on any failure."""
    from clusterkit.config.load import load_file

    real = path.resolve()  # a symlinked site: its target is edited, the link kept
    data = text.replace("\n", newline).encode("utf-8")
    try:
        st = os.stat(real)
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".ck-tmp", dir=real.parent)
    except OSError as exc:
        raise ConfigError.single(str(path), None, "", f"cannot write beside the site file: "
                                                      f"{exc.strerror or exc}; nothing written") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            load_file(tmp)
        except ConfigError as exc:
            first = exc.issues[0]
            where = f"line {first.line}: " if first.line else ""
            what = f"{first.loc}: " if first.loc else ""
            raise ConfigError.single(str(path), None, "", f"--write would make the site invalid ({where}{what}"
                                                          f"{first.message}); nothing written") from None
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        if st.st_nlink > 1 or not _same_owner(tmp, st):
            _write_in_place(real, data)
        else:
            os.replace(tmp, real)
            _sync_dir(real.parent)
    except OSError as exc:
        raise ConfigError.single(str(path), None, "", f"cannot write the site file: {exc.strerror or exc}; "
                                                      "nothing written") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _same_owner(tmp: str, st: os.stat_result) -> bool:
    """Give the temp file the site's owner and group; False where that is not allowed."""
    if (st.st_uid, st.st_gid) == (os.stat(tmp).st_uid, os.stat(tmp).st_gid):
        return True
    try:
        os.chown(tmp, st.st_uid, st.st_gid)
    except PermissionError:
        return False
    return True


def _write_in_place(real: Path, data: bytes) -> None:
    fd = os.open(real, os.O_WRONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.truncate()
        fh.flush()
        os.fsync(fh.fileno())


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
