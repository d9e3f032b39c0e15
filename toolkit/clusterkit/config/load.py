"""Loading site configs: ``extends:`` deep merge, validation errors as ``file:line``, the
trust checks (`config.trust`), and the search path.

Loading never probes the cluster: it reads files and validates.  Every problem is reported at once
as ``file:line: key.path: message`` (a :class:`~clusterkit.errors.ConfigError`), with the line taken
from whichever file in the ``extends`` chain set that key.
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from clusterkit.config import trust
from clusterkit.config.schema import Site, StageOverride
from clusterkit.config.yaml_lines import Doc, KeyPath, display, dotted, read_doc
from clusterkit.errors import ConfigError, ConfigIssue

# --------------------------------------------------------------------------------------------
# extends + deep merge


def _deep_merge(parent: Doc, child: Doc) -> Doc:
    """Child wins; mappings merge key by key; lists and scalars are replaced whole."""

    def merge(a: Any, b: Any, path: KeyPath) -> Any:
        if isinstance(a, dict) and isinstance(b, dict):
            out = dict(a)
            for k, v in b.items():
                out[k] = merge(a[k], v, (*path, k)) if k in a else v
            return out
        return b

    # The child's line wins for every path it sets; parent records left under a list the child
    # replaced are never looked up, since validation errors name only paths in the merged data.
    lines = {**parent.lines, **child.lines}
    raw = {p: t for p, t in parent.raw.items() if p not in child.lines}
    raw.update(child.raw)
    return Doc(merge(parent.data, child.data, ()), lines, raw)


def _is_yaml_name(path: Path) -> bool:
    return all(p.suffix in (".yaml", ".yml") for p in (path, path.resolve()))


def _load_chain(file: Path, seen: tuple[Path, ...] = ()) -> Doc:
    resolved = file.resolve()
    if resolved in seen:
        chain = " -> ".join(display(p) for p in (*seen, resolved))
        raise ConfigError.single(display(seen[-1]), None, "extends", f"extends cycle: {chain}")
    doc = read_doc(file)
    parent_ref = doc.data.pop("extends", None)
    if parent_ref is None:
        return doc
    where = doc.lines.get(("extends",), (display(file), None))
    if not isinstance(parent_ref, str) or not parent_ref:
        raise ConfigError.single(where[0], where[1], "extends", "must be a file name or path")
    parent_file = (file.parent / os.path.expanduser(parent_ref))
    if not _is_yaml_name(parent_file):
        # errors quote what they read; extends must not become a way to print any readable file
        raise ConfigError.single(where[0], where[1], "extends",
                                 f"parent config {parent_ref!r} must be a .yaml or .yml site file")
    if not parent_file.exists():
        raise ConfigError.single(where[0], where[1], "extends",
                                 f"parent config {parent_ref!r} not found (looked for {display(parent_file)})")
    parent = _load_chain(parent_file, (*seen, resolved))
    return _deep_merge(parent, doc)


# --------------------------------------------------------------------------------------------
# validation -> ConfigError with file:line


def _line_for(lines: dict[KeyPath, tuple[str, int]], loc: KeyPath, default_file: str) -> tuple[str, int | None]:
    for n in range(len(loc), -1, -1):
        hit = lines.get(tuple(loc[:n]))
        if hit:
            return hit
    return default_file, None


def _model_at(loc: KeyPath, data: Any) -> tuple[type[BaseModel] | None, tuple[type[BaseModel], ...]]:
    """The pydantic model class that owns the mapping at ``loc`` in ``data`` (for listing valid
    keys), and the other models a union there could have been (``scheduler:``'s other kinds)."""
    model: type[BaseModel] = Site
    others: tuple[type[BaseModel], ...] = ()
    node = data
    i = 0
    while i < len(loc):
        part = loc[i]
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and part < len(node) else None
            i += 1
            continue
        if model is Site and part == "stages":
            model, others, i = StageOverride, (), i + 2  # stages.<stage name>.<key>
            node = (node.get("stages") or {}).get(loc[i - 1]) if isinstance(node, dict) else None
            continue
        field = model.model_fields.get(part)
        node = node.get(part) if isinstance(node, dict) else None
        members = [m for m in _inner_models(field.annotation) if not _any_kind(m)] if field else []
        if not members:
            return None, ()
        model = _by_kind(members, node)
        others, i = tuple(m for m in members if m is not model), i + 1
    return model, others


def _inner_models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", None) or () for m in _inner_models(arg)]


def _any_kind(model: type[BaseModel]) -> bool:
    """Whether ``model`` is a union's catch-all for a ``kind`` that names none of its models."""
    field = model.model_fields.get("kind")
    return field is not None and len(typing.get_args(field.annotation)) > 1


def _by_kind(members: list[type[BaseModel]], node: Any) -> type[BaseModel]:
    """Of a union's models, the one whose ``kind`` the mapping ``node`` names (or defaults to)."""
    for m in members:
        field = m.model_fields.get("kind")
        if field is None or not isinstance(node, dict):
            continue
        kind = node.get("kind", None if field.is_required() else field.default)
        if kind in typing.get_args(field.annotation):
            return m
    return members[0]


def _issue_from_error(err: Mapping[str, Any], doc: Doc, file: str) -> ConfigIssue:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    at = (err.get("ctx") or {}).get("at")   # a validator naming a key below its field (schema.Site)
    if isinstance(at, list):
        loc += tuple(at)
    # pydantic puts union/literal branch names into loc; keep only real keys and indices
    keep_last = err["type"] == "missing"
    loc = tuple(p for i, p in enumerate(loc)
                if isinstance(p, int) or p in _all_keys(doc.data, loc) or (keep_last and i == len(loc) - 1))
    where = _line_for(doc.lines, loc, file)
    kind = err["type"]
    if kind == "extra_forbidden":
        model, others = _model_at(loc[:-1], doc.data)
        valid = ", ".join(sorted(model.model_fields)) if model else ""
        msg = f"unknown key {loc[-1]!r}" + (f"; valid keys: {valid}" if valid else "")
        elsewhere = [o for o in others if loc[-1] in o.model_fields and "kind" in o.model_fields]
        if model is not None and "kind" in model.model_fields and elsewhere:
            theirs = " or ".join(str(typing.get_args(o.model_fields["kind"].annotation)[0]) for o in elsewhere)
            here = typing.get_args(model.model_fields["kind"].annotation)[0]
            msg += f" (a key of kind {theirs}, not of kind {here})"
        return ConfigIssue(where[0], where[1], dotted(loc), msg)
    if kind == "missing":
        return ConfigIssue(where[0], where[1], dotted(loc), "required key is missing")
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind in ("literal_error", "enum"):
        msg = f"{msg}; got {err.get('input')!r}"
    return ConfigIssue(where[0], where[1], dotted(loc), msg)


def _all_keys(data: Any, loc: KeyPath) -> set[Any]:
    keys: set[Any] = set()
    node = data
    for part in loc:
        if isinstance(node, dict):
            keys.update(node.keys())
            node = node.get(part) if isinstance(part, str) else None
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            node = None
    if isinstance(node, dict):
        keys.update(node.keys())
    return keys


def _source_text(value: Any, annotation: Any, path: KeyPath, raw: Mapping[KeyPath, str]) -> Any:
    """Give string fields the plain scalar's source text: YAML 1.1 reads ``time: 12:00:00`` as
    the sexagesimal 43200 and ``cuda: 12.10`` as 12.1, neither of which the user wrote."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if not isinstance(value, dict):
            return value
        fields = annotation.model_fields
        return {k: _source_text(v, fields[k].annotation, (*path, k), raw) if k in fields else v
                for k, v in value.items()}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list and isinstance(value, list):
        return [_source_text(v, args[0], (*path, i), raw) for i, v in enumerate(value)]
    if origin is dict and isinstance(value, dict):
        return {k: _source_text(v, args[1], (*path, k), raw) for k, v in value.items()}
    members = args if origin in (typing.Union, types.UnionType) else (annotation,)
    # a tagged union's members (scheduler:'s kinds) are Annotated[model, Tag(...)]
    members = tuple(typing.get_args(m)[0] if typing.get_origin(m) is typing.Annotated else m for m in members)
    if str in members and path in raw and value is not None and not isinstance(value, str):
        return value if isinstance(value, bool) and bool in members else raw[path]
    for member in members:
        if isinstance(member, type) and issubclass(member, BaseModel):
            return _source_text(value, member, path, raw)
    return value


def validate_data(data: Mapping[str, Any], lines: dict[KeyPath, tuple[str, int]], file: str, base_dir: Path,
                  raw: Mapping[KeyPath, str] | None = None) -> Site:
    """Validate merged config data; raise ConfigError listing every problem with file:line."""
    doc = Doc(_source_text(dict(data), Site, (), raw or {}), lines)
    try:
        site = Site.model_validate(doc.data)
    except ValidationError as exc:
        issues = [_issue_from_error(e, doc, file) for e in exc.errors()]
        issues.sort(key=lambda i: (i.file != file, i.file, i.line or 0))
        raise ConfigError(issues) from None
    trust.check_job_code(site, lambda key: _line_for(lines, key, file))
    if site.templates is not None:
        tdir = (base_dir / os.path.expanduser(site.templates)).resolve()
        where = _line_for(lines, ("templates",), file)
        if not tdir.is_dir():
            raise ConfigError.single(where[0], where[1], "templates",
                                     f"template override directory {site.templates!r} not found")
        trust.check_templates(Path(where[0]), tdir, where)
        site = site.model_copy(update={"templates": str(tdir)})
    return site


def is_partial(path: str | os.PathLike[str]) -> bool:
    """A file named ``_*.yaml`` is a partial config, only pulled in with ``extends:``."""
    return Path(path).name.startswith("_")


def check_partial(path: str | os.PathLike[str]) -> None:
    """Validate a partial config as a fragment: every key it sets (its own ``extends:`` merged)
    must be a known key with a valid value; the keys a site must have may be left to the child.
    Raises ConfigError listing every problem with file:line."""
    file = Path(path)
    doc = _load_chain(file)
    shown = display(file)
    data = Doc(_source_text(dict(doc.data), Site, (), doc.raw), doc.lines)
    try:
        Site.model_validate(data.data)
    except ValidationError as exc:
        issues = [_issue_from_error(e, data, shown) for e in exc.errors() if e["type"] != "missing"]
        if issues:
            issues.sort(key=lambda i: (i.file != shown, i.file, i.line or 0))
            raise ConfigError(issues) from None


def load_file(path: str | os.PathLike[str]) -> Site:
    """Load, merge (``extends``) and validate one site config file."""
    return load_file_located(path)[0]


def load_file_located(path: str | os.PathLike[str]) -> tuple[Site, dict[KeyPath, tuple[str, int]]]:
    """:func:`load_file`, plus where each key path was set: ``{("nodes", "mem_gb"): (file, line)}``."""
    file = Path(path)
    doc = _load_chain(file)
    site = validate_data(doc.data, doc.lines, display(file), file.resolve().parent, doc.raw)
    site._source = str(file.resolve())
    return site, doc.lines


# --------------------------------------------------------------------------------------------
# search path


def builtin_sites_dir() -> Path:
    """The example sites shipped inside the package (the ``local`` default among them)."""
    packaged = Path(__file__).resolve().parents[1] / "site_configs"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / "site_configs"  # source checkout


def search_path() -> list[tuple[Path, str]]:
    """(directory, why) pairs in lookup order; the first hit wins."""
    dirs: list[tuple[Path, str]] = [(Path.cwd() / "site_configs", "./site_configs")]
    for entry in filter(None, os.environ.get("CLUSTERKIT_SITES", "").split(os.pathsep)):
        dirs.append((Path(entry).expanduser(), "$CLUSTERKIT_SITES"))
    dirs.append((Path("~/.config/clusterkit/sites").expanduser(), "~/.config/clusterkit/sites"))
    dirs.append((Path("/etc/clusterkit/sites"), "/etc/clusterkit/sites"))
    dirs.append((builtin_sites_dir(), "built-in"))
    seen: set[Path] = set()
    unique = []
    for d, why in dirs:
        key = d.resolve() if d.exists() else d
        if key not in seen:
            seen.add(key)
            unique.append((d, why))
    return unique


def find_site(ref: str) -> Path:
    """Resolve a site reference (a path, or a name on the search path) to a file."""
    if os.sep in ref or ref.endswith((".yaml", ".yml")):
        path = Path(ref).expanduser()
        if not path.is_file():
            raise ConfigError.single(ref, None, "", "site config file not found")
        return path
    for directory, _why in search_path():
        for ext in (".yaml", ".yml"):
            candidate = directory / f"{ref}{ext}"
            if candidate.is_file():
                return candidate
    names = sorted({p.stem for d, _ in search_path() if d.is_dir() for p in _site_files(d)})
    raise ConfigError.single(ref, None, "",
                             f"no site named {ref!r} on the search path; known sites: {', '.join(names) or 'none'}")


def _site_files(directory: Path) -> list[Path]:
    files = [p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()
             and not p.name.startswith(".")]  # hidden files (an editor's or a writer's temp) are no sites
    # files named base*.yaml or starting with '_' are partial configs meant for `extends:`
    return sorted(p for p in files if not p.name.startswith("_"))


def load_site(ref: str) -> Site:
    """Load a site by path or by name from the search path."""
    return load_file(find_site(ref))


@dataclass(frozen=True)
class SiteEntry:
    name: str
    path: Path
    origin: str
    shadowed: bool


def list_sites() -> list[SiteEntry]:
    """Every site file on the search path, in lookup order, with shadowed duplicates marked."""
    out: list[SiteEntry] = []
    seen: set[str] = set()
    for directory, why in search_path():
        if not directory.is_dir():
            continue
        for path in _site_files(directory):
            out.append(SiteEntry(path.stem, path, why, path.stem in seen))
            seen.add(path.stem)
    return out


def json_schema() -> dict[str, Any]:
    schema = Site.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "clusterkit site config"
    schema.setdefault("properties", {})["extends"] = {"type": "string",
                                                      "description": "parent config to deep-merge (child wins)"}
    from clusterkit.config.key_docs import describe

    return describe(schema)
