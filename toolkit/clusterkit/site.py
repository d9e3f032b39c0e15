"""Site configs: YAML with line numbers, ``extends:`` deep merge, pydantic validation, search path.

A site config describes one cluster (DESIGN.md section 4).  Loading never probes the cluster:
it reads files and validates.  Every problem is reported at once as ``file:line: key.path: message``
(a :class:`~clusterkit.errors.ConfigError`), with the line taken from whichever file in the
``extends`` chain set that key.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator

from clusterkit import nodes as nodelib
from clusterkit.errors import ConfigError, ConfigIssue

STAGE_NAMES = ("single-node", "multi-node", "large-cluster")
LAUNCHER_NAMES = ("torchrun", "deepspeed", "horovod", "accelerate", "megatron", "colossalai", "srun")
_TIME_RE = re.compile(r"^(\d+-)?\d{1,3}(:\d{2}){0,2}$|^\d+$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Scheduler(_Model):
    """How jobs reach the machines: Slurm, or this machine with no scheduler."""

    kind: Literal["slurm", "local"] = "slurm"
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    time: str = "01:00:00"
    sbatch: dict[str, str | int | bool] = Field(default_factory=dict)
    max_restarts: int = Field(3, ge=0, le=100)
    preempt_signal_s: int = Field(120, ge=10, le=3600)
    grace_s: int = Field(60, ge=1, le=3600, validate_default=True,
                         description="seconds the ranks get to save after SIGTERM (time-limit warning, cancel)")

    @field_validator("grace_s")
    @classmethod
    def _grace(cls, v: int, info: ValidationInfo) -> int:
        signal_s = info.data.get("preempt_signal_s")
        # the ranks save after the USR2 warning and the job requeues itself before the limit
        if isinstance(signal_s, int) and v >= signal_s:
            raise ValueError(f"grace_s {v} must be less than preempt_signal_s {signal_s}: the ranks save "
                             "between the time-limit warning and the requeue, before the limit")
        return v

    @field_validator("time")
    @classmethod
    def _time(cls, v: str) -> str:
        if not _TIME_RE.match(v):
            raise ValueError(f"{v!r} is not a Slurm time (MM, HH:MM:SS or D-HH:MM:SS)")
        return v

    @field_validator("sbatch")
    @classmethod
    def _sbatch(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in v:
            if not re.match(r"^[a-z][a-z0-9-]*$", key):
                raise ValueError(f"sbatch option {key!r} must be a long option name like 'exclusive' or 'mem'")
        return v


class Nodes(_Model):
    """The compute nodes and what each one has."""

    nodelist: str
    gpus_per_node: int = Field(ge=1, le=64)
    gpu_model: Optional[str] = None
    gpu_mem_gb: float = Field(80, gt=0)
    cpus_per_node: int = Field(16, ge=1)
    mem_gb: float = Field(256, gt=0)

    @field_validator("nodelist")
    @classmethod
    def _nodelist(cls, v: str) -> str:
        try:
            nodelib.parse(v)
        except nodelib.HostlistError as exc:
            raise ValueError(str(exc)) from None
        return v

    @property
    def hosts(self) -> list[str]:
        return nodelib.expand(self.nodelist)


class SSH(_Model):
    """How preflight reaches the nodes over SSH."""

    user: Optional[str] = None
    port: int = Field(22, ge=1, le=65535)
    jump_host: Optional[str] = None
    known_hosts: str = "~/.ssh/known_hosts"
    identity_file: Optional[str] = None
    connect_timeout_s: float = Field(10, gt=0)
    command_timeout_s: float = Field(30, gt=0)
    fanout: int = Field(64, ge=1, le=1024)


class Container(_Model):
    runtime: Literal["pyxis", "apptainer"]
    image: str
    mounts: list[str] = Field(default_factory=list)

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, v: list[str]) -> list[str]:
        for m in v:
            if not m.startswith("/"):
                raise ValueError(f"mount {m!r} must be an absolute 'src[:dst]' path")
        return v


class Software(_Model):
    driver_min: Optional[str] = None
    cuda: Optional[str] = None
    modules: list[str] = Field(default_factory=list)
    container: Optional[Container] = None

    @field_validator("driver_min", "cuda")
    @classmethod
    def _version(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.match(r"^\d+(\.\d+)*$", v):
            raise ValueError(f"{v!r} is not a dotted version like '535.104'")
        return v


class RoCE(_Model):
    gid_index: Optional[int] = Field(None, ge=0, le=255)
    traffic_class: Optional[int] = Field(None, ge=0, le=255)
    service_level: Optional[int] = Field(None, ge=0, le=15)


class Network(_Model):
    """The fabric NCCL runs over, and the interfaces that carry it."""

    fabric: Literal["infiniband", "roce", "ethernet"] = "ethernet"
    hcas: list[str] = Field(default_factory=list, validate_default=True)
    port_rate_gbps: Optional[int] = Field(None, gt=0)
    socket_ifname: Optional[str] = None
    rail_optimized: bool = False
    roce: Optional[RoCE] = None

    @field_validator("hcas")
    @classmethod
    def _hcas(cls, v: list[str], info: ValidationInfo) -> list[str]:
        fabric = info.data.get("fabric")
        if fabric == "ethernet" and v:
            raise ValueError("HCAs listed but fabric is ethernet: HCAs are for infiniband or roce fabrics")
        if fabric in ("infiniband", "roce") and not v:
            raise ValueError(f"fabric {fabric} needs at least one HCA (e.g. [mlx5_0, mlx5_1])")
        return v

    @field_validator("roce")
    @classmethod
    def _roce(cls, v: Optional[RoCE], info: ValidationInfo) -> Optional[RoCE]:
        if v is not None and info.data.get("fabric") != "roce":
            raise ValueError(f"roce settings given but fabric is {info.data.get('fabric')}")
        return v


class Storage(_Model):
    path: str
    type: Literal["lustre", "nfs", "gpfs", "local"]
    min_free_gb: float = Field(0, ge=0)
    use: list[Literal["data", "checkpoints", "scratch", "home", "software"]] = Field(default_factory=list)
    timeout_s: float = Field(10, gt=0)
    shared: Optional[bool] = Field(None, description="seen by every node (default: true for lustre, nfs, gpfs)")

    @field_validator("path")
    @classmethod
    def _abs(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"storage path {v!r} must be absolute")
        return v

    @property
    def is_shared(self) -> bool:
        return self.shared if self.shared is not None else self.type in ("lustre", "nfs", "gpfs")


class NCCL(_Model):
    env: dict[str, str | int] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _names(cls, v: dict[str, Any]) -> dict[str, str]:
        for k in v:
            if not _ENV_NAME_RE.match(k):
                raise ValueError(f"{k!r} is not an environment variable name")
        return {k: str(val) for k, val in v.items()}


class StageOverride(_Model):
    launcher: Optional[Literal["torchrun", "deepspeed", "horovod", "accelerate", "megatron", "colossalai", "srun"]] = None
    nodes: Optional[int] = Field(None, ge=1)
    time: Optional[str] = None
    partition: Optional[str] = None
    max_restarts: Optional[int] = Field(None, ge=0, le=100)
    container: Optional[bool] = None


class Preflight(_Model):
    """What ``clusterkit submit`` checks before it queues a job, and what it does with bad nodes."""

    policy: Literal["exclude", "refuse"] = "exclude"
    in_job: bool = False
    max_excluded_fraction: float = Field(0.1, ge=0, le=1)
    before_submit: bool = True
    transport: Literal["ssh", "srun"] = "ssh"


class Cost(_Model):
    gpu_hour: float = Field(gt=0)
    currency: str = "USD"


class Site(_Model):
    """One cluster, validated.  Frozen: build a new one rather than mutate."""

    name: str
    description: str = ""
    scheduler: Scheduler = Field(default_factory=Scheduler)
    nodes: Nodes
    ssh: SSH = Field(default_factory=SSH)
    software: Software = Field(default_factory=Software)
    network: Network = Field(default_factory=Network)
    storage: list[Storage] = Field(default_factory=list)
    nccl: NCCL = Field(default_factory=NCCL)
    stages: dict[Literal["single-node", "multi-node", "large-cluster"], StageOverride] = Field(default_factory=dict)
    preflight: Preflight = Field(default_factory=Preflight)
    cost: Optional[Cost] = None
    templates: Optional[str] = None

    _source: str = PrivateAttr(default="")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", v):
            raise ValueError(f"{v!r}: use letters, digits, '.', '_' and '-'")
        return v

    @model_validator(mode="after")
    def _local_is_one_node(self) -> "Site":
        if self.scheduler.kind == "local" and len(self.nodes.hosts) != 1:
            raise ValueError("a local site runs on this machine: nodes.nodelist must name exactly one host")
        return self

    @property
    def source(self) -> str:
        """The file this site was loaded from (empty for sites built in code)."""
        return self._source

    @property
    def shared_storage(self) -> list[Storage]:
        return [s for s in self.storage if s.is_shared]


# --------------------------------------------------------------------------------------------
# YAML with line numbers


Path_ = tuple[str | int, ...]


@dataclass
class _Doc:
    data: Any
    lines: dict[Path_, tuple[str, int]]  # key path -> (file, 1-based line)


def _compose(text: str, file: str) -> Any:
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise ConfigError.single(file, line, "", f"invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError.single(file, None, "", f"invalid YAML: {exc}") from None


def _build(node: Any, path: Path_, file: str, lines: dict[Path_, tuple[str, int]], issues: list[ConfigIssue]) -> Any:
    """Turn a composed YAML node into plain data, recording the line of every key path."""
    lines[path] = (file, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _construct(key_node)
            if not isinstance(key, str):
                issues.append(ConfigIssue(file, key_node.start_mark.line + 1, _dotted(path), f"key {key!r} must be a string"))
                continue
            if key in out:
                issues.append(ConfigIssue(file, key_node.start_mark.line + 1, _dotted(path + (key,)), "duplicate key"))
                continue
            lines[path + (key,)] = (file, key_node.start_mark.line + 1)
            out[key] = _build(value_node, path + (key,), file, lines, issues)
            lines[path + (key,)] = (file, key_node.start_mark.line + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, path + (i,), file, lines, issues) for i, item in enumerate(node.value)]
    return _construct(node)


def _construct(node: Any) -> Any:
    """Plain value of a scalar (or complex key) node, with YAML's safe type resolution."""
    return yaml.SafeLoader("").construct_object(node, deep=True)


def _dotted(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _read_doc(file: Path) -> _Doc:
    shown = _display(file)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError.single(shown, None, "", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError.single(shown, None, "", f"cannot read: {exc}") from None
    node = _compose(text, shown)
    if node is None:
        raise ConfigError.single(shown, 1, "", "empty site config")
    lines: dict[Path_, tuple[str, int]] = {}
    issues: list[ConfigIssue] = []
    data = _build(node, (), shown, lines, issues)
    if issues:
        raise ConfigError(issues)
    if not isinstance(data, dict):
        raise ConfigError.single(shown, 1, "", "a site config must be a mapping of keys (name:, nodes:, ...)")
    return _Doc(data, lines)


def _display(file: Path) -> str:
    try:
        return str(file.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(file)


# --------------------------------------------------------------------------------------------
# extends + deep merge


def _deep_merge(parent: _Doc, child: _Doc) -> _Doc:
    """Child wins; mappings merge key by key; lists and scalars are replaced whole."""

    def merge(a: Any, b: Any, path: Path_) -> Any:
        if isinstance(a, dict) and isinstance(b, dict):
            out = dict(a)
            for k, v in b.items():
                out[k] = merge(a[k], v, path + (k,)) if k in a else v
            return out
        return b

    # The child's line wins for every path it sets; parent records left under a list the child
    # replaced are never looked up, since validation errors name only paths in the merged data.
    lines = {**parent.lines, **child.lines}
    return _Doc(merge(parent.data, child.data, ()), lines)


def _load_chain(file: Path, seen: tuple[Path, ...] = ()) -> _Doc:
    resolved = file.resolve()
    if resolved in seen:
        chain = " -> ".join(_display(p) for p in seen + (resolved,))
        raise ConfigError.single(_display(seen[-1]), None, "extends", f"extends cycle: {chain}")
    doc = _read_doc(file)
    parent_ref = doc.data.pop("extends", None)
    if parent_ref is None:
        return doc
    where = doc.lines.get(("extends",), (_display(file), None))
    if not isinstance(parent_ref, str) or not parent_ref:
        raise ConfigError.single(where[0], where[1], "extends", "must be a file name or path")
    parent_file = (file.parent / os.path.expanduser(parent_ref))
    if not parent_file.exists():
        raise ConfigError.single(where[0], where[1], "extends", f"parent config {parent_ref!r} not found (looked for {_display(parent_file)})")
    parent = _load_chain(parent_file, seen + (resolved,))
    return _deep_merge(parent, doc)


# --------------------------------------------------------------------------------------------
# validation -> ConfigError with file:line


def _line_for(lines: dict[Path_, tuple[str, int]], loc: Path_, default_file: str) -> tuple[str, int | None]:
    for n in range(len(loc), -1, -1):
        hit = lines.get(tuple(loc[:n]))
        if hit:
            return hit
    return default_file, None


def _model_at(loc: Path_) -> type[BaseModel] | None:
    """The pydantic model class that owns the mapping at ``loc`` (for listing valid keys)."""
    model: Any = Site
    i = 0
    while i < len(loc):
        part = loc[i]
        if isinstance(part, int):
            i += 1
            continue
        if model is Site and part == "stages":
            model, i = StageOverride, i + 2  # stages.<stage name>.<key>
            continue
        field = model.model_fields.get(part)
        model = _inner_model(field.annotation) if field else None
        if model is None:
            return None
        i += 1
    return model


def _inner_model(annotation: Any) -> Any:
    args = getattr(annotation, "__args__", None)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in args or ():
        inner = _inner_model(arg)
        if inner is not None:
            return inner
    return None


def _issue_from_error(err: Mapping[str, Any], doc: _Doc, file: str) -> ConfigIssue:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    # pydantic puts union/literal branch names into loc; keep only real keys and indices
    keep_last = err["type"] == "missing"
    loc = tuple(p for i, p in enumerate(loc)
                if isinstance(p, int) or p in _all_keys(doc.data, loc) or (keep_last and i == len(loc) - 1))
    where = _line_for(doc.lines, loc, file)
    kind = err["type"]
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        valid = ", ".join(sorted(model.model_fields)) if model else ""
        msg = f"unknown key {loc[-1]!r}" + (f"; valid keys: {valid}" if valid else "")
        return ConfigIssue(where[0], where[1], _dotted(loc), msg)
    if kind == "missing":
        return ConfigIssue(where[0], where[1], _dotted(loc), "required key is missing")
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind in ("literal_error", "enum"):
        msg = f"{msg}; got {err.get('input')!r}"
    return ConfigIssue(where[0], where[1], _dotted(loc), msg)


def _all_keys(data: Any, loc: Path_) -> set[Any]:
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


def validate_data(data: Mapping[str, Any], lines: dict[Path_, tuple[str, int]], file: str, base_dir: Path) -> Site:
    """Validate merged config data; raise ConfigError listing every problem with file:line."""
    doc = _Doc(dict(data), lines)
    try:
        site = Site.model_validate(doc.data)
    except ValidationError as exc:
        issues = [_issue_from_error(e, doc, file) for e in exc.errors()]
        issues.sort(key=lambda i: (i.file != file, i.file, i.line or 0))
        raise ConfigError(issues) from None
    if site.templates is not None:
        tdir = (base_dir / os.path.expanduser(site.templates)).resolve()
        if not tdir.is_dir():
            where = _line_for(lines, ("templates",), file)
            raise ConfigError.single(where[0], where[1], "templates", f"template override directory {site.templates!r} not found")
        site = site.model_copy(update={"templates": str(tdir)})
    return site


def load_file(path: str | os.PathLike[str]) -> Site:
    """Load, merge (``extends``) and validate one site config file."""
    file = Path(path)
    doc = _load_chain(file)
    site = validate_data(doc.data, doc.lines, _display(file), file.resolve().parent)
    site._source = str(file.resolve())
    return site


# --------------------------------------------------------------------------------------------
# search path


def builtin_sites_dir() -> Path:
    """The example sites shipped inside the package (the ``local`` default among them)."""
    packaged = Path(__file__).resolve().parent / "site_configs"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "site_configs"  # source checkout


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
    raise ConfigError.single(ref, None, "", f"no site named {ref!r} on the search path; known sites: {', '.join(names) or 'none'}")


def _site_files(directory: Path) -> list[Path]:
    files = [p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()]
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
    schema.setdefault("properties", {})["extends"] = {"type": "string", "description": "parent config to deep-merge (child wins)"}
    return schema
