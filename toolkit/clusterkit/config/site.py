"""Site configs: YAML with line numbers, ``extends:`` deep merge, pydantic validation, search path.

A site config describes one cluster (docs/architecture.md §2).  Loading never probes the cluster:
it reads files and validates.  Every problem is reported at once as ``file:line: key.path: message``
(a :class:`~clusterkit.errors.ConfigError`), with the line taken from whichever file in the
``extends`` chain set that key.
"""

from __future__ import annotations

import os
import re
import stat
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator

from clusterkit import hostlist
from clusterkit.errors import ConfigError, ConfigIssue
from clusterkit.vocab import Launcher, ProbeTransport, SchedulerKind, Stage, check_slurm_time

_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: ``nccl.env`` takes communication settings only: names with these prefixes ...
NCCL_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "UCX_", "FI_", "GLOO_")
#: ... and these names (what NCCL's performance depends on outside its own namespace).
NCCL_ENV_NAMES = ("CUDA_DEVICE_MAX_CONNECTIONS", "TORCH_DISTRIBUTED_DEBUG")

#: ``#SBATCH`` options clusterkit writes itself, and where a site or user sets them instead.
OWNED_SBATCH = {
    "job-name": "--job-name", "nodes": "--nodes (or the stage)", "ntasks": "--launcher (it decides the tasks)",
    "ntasks-per-node": "--launcher (it decides the tasks)", "ntasks-per-core": "--launcher (it decides the tasks)",
    "ntasks-per-socket": "--launcher (it decides the tasks)", "ntasks-per-gpu": "--launcher (it decides the tasks)",
    "gpus-per-node": "--gpus-per-node", "gpus": "--gpus-per-node", "cpus-per-task": "--set cpus_per_task=N",
    "partition": "scheduler.partition", "account": "scheduler.account", "qos": "scheduler.qos",
    "time": "scheduler.time", "output": "--out (logs go to the run directory)",
    "error": "--out (logs go to the run directory)", "input": "the training command",
    "open-mode": "scheduler.max_restarts (requeued runs append to their log)", "signal": "scheduler.preempt_signal_s",
    "requeue": "scheduler.max_restarts", "no-requeue": "scheduler.max_restarts: 0",
    "chdir": "--out (jobs run in their run directory)", "export": "nccl.env",
    "export-file": "nccl.env", "get-user-env": "nccl.env", "wrap": "the command after '--'",
    "exclude": "--exclude", "parsable": "submit --json (clusterkit reads sbatch's answer itself)",
    "wait": "submit --wait", "test-only": "submit --dry-run", "array": "one clusterkit submit per job",
}


class _Model(BaseModel):
    # strict: `gpus_per_node: true` is not 1; allow_inf_nan: `.inf` GB of memory is not a size
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Scheduler(_Model):
    """How jobs reach the machines: Slurm, or this machine with no scheduler."""

    kind: SchedulerKind = "slurm"
    cluster: Optional[str] = Field(None, description="Slurm's ClusterName (scontrol show config): which cluster this site describes")
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
        return check_slurm_time(v)

    @field_validator("sbatch")
    @classmethod
    def _sbatch(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in v:
            if not re.fullmatch(r"[a-z][a-z0-9-]*", key):
                raise ValueError(f"sbatch option {key!r} must be a long option name like 'exclusive' or 'mem'")
            # sbatch reads #SBATCH lines with getopt_long, which takes any unambiguous prefix
            # ('--out' is '--output'): a prefix of an owned option is that option.
            owned = next((name for name in OWNED_SBATCH if name.startswith(key)), None)
            if owned:
                raise ValueError(f"sbatch option {key!r} sets --{owned}, which clusterkit writes itself; "
                                 f"use {OWNED_SBATCH[owned]}")
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
            hostlist.parse(v)
        except hostlist.HostlistError as exc:
            raise ValueError(str(exc)) from None
        return v

    @property
    def hosts(self) -> list[str]:
        return hostlist.expand(self.nodelist)


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
        if v is not None and not re.fullmatch(r"\d+(\.\d+)*", v):
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
            if not _ENV_NAME_RE.fullmatch(k):
                raise ValueError(f"{k!r} is not an environment variable name")
            if not (k.startswith(NCCL_ENV_PREFIXES) or k in NCCL_ENV_NAMES):
                raise ValueError(f"{k}: nccl.env takes communication settings only: names starting with "
                                 f"{', '.join(NCCL_ENV_PREFIXES)} or one of {', '.join(NCCL_ENV_NAMES)}")
        return {k: str(val) for k, val in v.items()}


class StageOverride(_Model):
    launcher: Optional[Launcher] = None
    nodes: Optional[int] = Field(None, ge=1)
    time: Optional[str] = None
    partition: Optional[str] = None
    max_restarts: Optional[int] = Field(None, ge=0, le=100)
    container: Optional[bool] = None

    @field_validator("time")
    @classmethod
    def _time(cls, v: Optional[str]) -> Optional[str]:
        return None if v is None else check_slurm_time(v)


class Preflight(_Model):
    """What ``clusterkit submit`` checks before it queues a job, and what it does with bad nodes."""

    policy: Literal["exclude", "refuse"] = "exclude"
    in_job: bool = False
    max_excluded_fraction: float = Field(0.1, ge=0, le=1)
    before_submit: bool = True
    transport: ProbeTransport = "ssh"


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
    stages: dict[Stage, StageOverride] = Field(default_factory=dict)
    preflight: Preflight = Field(default_factory=Preflight)
    cost: Optional[Cost] = None
    templates: Optional[str] = None

    _source: str = PrivateAttr(default="")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v):
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

Path_ = tuple[str | int, ...]

_CORE_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("null", "bool", "int", "float", "str", "map", "seq", "merge", "timestamp")}
_MERGE_TAG = "tag:yaml.org,2002:merge"
_EventLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class _Doc:
    data: Any
    lines: dict[Path_, tuple[str, int]]  # key path -> (file, 1-based line)
    raw: dict[Path_, str] = field(default_factory=dict)  # key path -> a plain scalar's source text


def _yaml_error(exc: yaml.YAMLError, file: str) -> ConfigError:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        return ConfigError.single(file, line, "", f"invalid YAML: {exc.problem or exc.context}")
    return ConfigError.single(file, None, "", f"invalid YAML: {exc}")


def _check_shape(text: str, file: str) -> None:
    """Count aliases and nesting on the event stream (flat, no recursion) before composing."""
    depth = aliases = 0
    try:
        for event in yaml.parse(text, Loader=_EventLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ConfigError.single(file, event.start_mark.line + 1, "",
                                             f"nesting deeper than {MAX_DEPTH} levels (the limit)")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise ConfigError.single(file, event.start_mark.line + 1, "",
                                             f"more than {MAX_ALIASES} YAML aliases (the limit)")
    except yaml.YAMLError as exc:
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
        self.lines: dict[Path_, tuple[str, int]] = {}
        self.raw: dict[Path_, str] = {}
        self.issues: list[ConfigIssue] = []
        self.values = 0
        self.open: set[int] = set()
        self.constructor = yaml.SafeLoader("")

    def _fail(self, node: Any, path: Path_, message: str) -> ConfigError:
        return ConfigError.single(self.file, node.start_mark.line + 1, _dotted(path), message)

    def build(self, node: Any, path: Path_) -> Any:
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
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def scalar(self, node: Any, path: Path_) -> Any:
        if node.style is None:
            self.raw[path] = node.value
        try:
            return self.constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError):
            raise self._fail(node, path, f"{node.value!r} is not a valid {node.tag.rsplit(':', 1)[-1]}") from None

    def key(self, node: Any, path: Path_) -> Any:
        if not isinstance(node, yaml.ScalarNode) or node.tag not in _CORE_TAGS:
            return None
        try:
            return self.constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError):
            raise self._fail(node, path, f"key {node.value!r} is not a valid {node.tag.rsplit(':', 1)[-1]}") from None

    def mapping(self, node: Any, path: Path_) -> dict[str, Any]:
        out: dict[str, Any] = {}
        merged: list[Any] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merged.append(value_node)
                continue
            key = self.key(key_node, path)
            if not isinstance(key, str):
                self.issues.append(ConfigIssue(self.file, key_node.start_mark.line + 1, _dotted(path), f"key {key!r} must be a string"))
                continue
            if key in out:
                self.issues.append(ConfigIssue(self.file, key_node.start_mark.line + 1, _dotted(path + (key,)), "duplicate key"))
                continue
            self.lines[path + (key,)] = (self.file, key_node.start_mark.line + 1)
            out[key] = self.build(value_node, path + (key,))
        for value_node in merged:
            self.merge(value_node, path, out)
        return out

    def merge(self, value_node: Any, path: Path_, out: dict[str, Any]) -> None:
        """``<<: *defaults`` (or a list of them): keys set explicitly, or by an earlier source, win."""
        sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                raise self._fail(source, path, "a merge key '<<' takes a mapping or a list of mappings")
            built = self.build(source, path + ("<<",))
            for key, value in built.items():
                if key not in out:
                    out[key] = value
                    self._move(path + ("<<", key), path + (key,))
        self._drop(path + ("<<",))

    def _move(self, src: Path_, dst: Path_) -> None:
        n = len(src)
        for table in (self.lines, self.raw):
            for p in [p for p in table if p[:n] == src]:
                table[dst + p[n:]] = table[p]

    def _drop(self, prefix: Path_) -> None:
        n = len(prefix)
        for table in (self.lines, self.raw):
            for p in [p for p in table if p[:n] == prefix]:
                del table[p]


def _dotted(path: Path_) -> str:
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
        raise ConfigError.single(shown, None, "", f"larger than {MAX_FILE_BYTES // 1024} KiB (the limit for a site file)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError.single(shown, None, "", f"not UTF-8 text (byte {exc.start})") from None


def _read_doc(file: Path) -> _Doc:
    shown = _display(file)
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
    return _Doc(data, builder.lines, builder.raw)


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
    raw = {p: t for p, t in parent.raw.items() if p not in child.lines}
    raw.update(child.raw)
    return _Doc(merge(parent.data, child.data, ()), lines, raw)


def _is_yaml_name(path: Path) -> bool:
    return all(p.suffix in (".yaml", ".yml") for p in (path, path.resolve()))


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
    if not _is_yaml_name(parent_file):
        # errors quote what they read; extends must not become a way to print any readable file
        raise ConfigError.single(where[0], where[1], "extends", f"parent config {parent_ref!r} must be a .yaml or .yml site file")
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


def _source_text(value: Any, annotation: Any, path: Path_, raw: Mapping[Path_, str]) -> Any:
    """Give string fields the plain scalar's source text: YAML 1.1 reads ``time: 12:00:00`` as
    the sexagesimal 43200 and ``cuda: 12.10`` as 12.1, neither of which the user wrote."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if not isinstance(value, dict):
            return value
        fields = annotation.model_fields
        return {k: _source_text(v, fields[k].annotation, path + (k,), raw) if k in fields else v for k, v in value.items()}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list and isinstance(value, list):
        return [_source_text(v, args[0], path + (i,), raw) for i, v in enumerate(value)]
    if origin is dict and isinstance(value, dict):
        return {k: _source_text(v, args[1], path + (k,), raw) for k, v in value.items()}
    members = args if origin in (typing.Union, types.UnionType) else (annotation,)
    if str in members and path in raw and value is not None and not isinstance(value, str):
        return value if isinstance(value, bool) and bool in members else raw[path]
    for member in members:
        if isinstance(member, type) and issubclass(member, BaseModel):
            return _source_text(value, member, path, raw)
    return value


def validate_data(data: Mapping[str, Any], lines: dict[Path_, tuple[str, int]], file: str, base_dir: Path,
                  raw: Mapping[Path_, str] | None = None) -> Site:
    """Validate merged config data; raise ConfigError listing every problem with file:line."""
    doc = _Doc(_source_text(dict(data), Site, (), raw or {}), lines)
    try:
        site = Site.model_validate(doc.data)
    except ValidationError as exc:
        issues = [_issue_from_error(e, doc, file) for e in exc.errors()]
        issues.sort(key=lambda i: (i.file != file, i.file, i.line or 0))
        raise ConfigError(issues) from None
    if site.templates is not None:
        tdir = (base_dir / os.path.expanduser(site.templates)).resolve()
        where = _line_for(lines, ("templates",), file)
        if not tdir.is_dir():
            raise ConfigError.single(where[0], where[1], "templates", f"template override directory {site.templates!r} not found")
        _check_template_trust(Path(where[0]), tdir, where)
        site = site.model_copy(update={"templates": str(tdir)})
    return site


def _check_template_trust(site_file: Path, tdir: Path, where: tuple[str, int | None]) -> None:
    """A template override is code: honour it only where no other user could have written it."""
    paths = [site_file.resolve(), site_file.resolve().parent, tdir, *sorted(tdir.iterdir())]
    for path in paths:
        problem = _writable_by_others(path)
        if problem:
            raise ConfigError.single(where[0], where[1], "templates",
                                     f"template override refused: {path} {problem}; templates are code and are used "
                                     "only from files that no other user can write")


def _writable_by_others(path: Path) -> str | None:
    try:
        st = path.stat()
    except OSError as exc:
        return f"cannot be checked ({exc.strerror})"
    if st.st_uid not in (0, os.getuid()):
        return f"is owned by uid {st.st_uid}, not by you or root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def load_file(path: str | os.PathLike[str]) -> Site:
    """Load, merge (``extends``) and validate one site config file."""
    return load_file_located(path)[0]


def load_file_located(path: str | os.PathLike[str]) -> tuple[Site, dict[Path_, tuple[str, int]]]:
    """:func:`load_file`, plus where each key path was set: ``{("nodes", "mem_gb"): (file, line)}``."""
    file = Path(path)
    doc = _load_chain(file)
    site = validate_data(doc.data, doc.lines, _display(file), file.resolve().parent, doc.raw)
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
