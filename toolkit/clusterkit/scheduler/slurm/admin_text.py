"""Total, pure parsers of what Slurm's admin commands print.

``scontrol show config`` (``Key = value`` lines), ``scontrol show partition -o`` and
``scontrol show node -o`` (one record per line, ``Key=value`` fields, split by
:func:`clusterkit.slurmtext.split_record`), and the GRES strings inside them (times:
:func:`clusterkit.slurmtext.parse_time`).  Nothing here runs a command; text that does not parse is kept, never
a crash: an unreadable record line is returned in ``unparsed``, an unreadable GRES entry
has ``count=None``, an unreadable time limit is ``None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clusterkit.hostlist import HostlistError, check_host
from clusterkit.slurmtext import lines as slurm_lines
from clusterkit.slurmtext import parse_time, split_record
from clusterkit.tooltext import parse_int

_NULL = {"(null)", "", "N/A", "none", "None"}


def _records(text: str, key: str) -> tuple[list[dict[str, str]], tuple[str, ...]]:
    """The records of ``text`` that have ``key`` (as ``{key: value}``), and the lines that have not."""
    records: list[dict[str, str]] = []
    unparsed: list[str] = []
    for line in _join_continuations(text):
        kv = split_record(line)
        if key in kv:
            records.append(kv)
        else:
            unparsed.append(line)
    return records, tuple(unparsed)


def _join_continuations(text: str) -> list[str]:
    """Records of the multi-line form (indented continuation lines) joined into one line each."""
    records: list[str] = []
    for line in slurm_lines(text):
        if not line.strip():
            continue
        if line[:1].isspace() and records:
            records[-1] += " " + line.strip()
        else:
            records.append(line.strip())
    return records


# ---------------------------------------------------------------------------------------------
# GRES
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gres:
    """One GRES entry: ``gpu:h100:8(S:0-1)`` -> name gpu, type h100, count 8."""

    name: str
    type: str | None
    count: int | None  # None: the count could not be read (raw kept)
    raw: str


_COUNT_RE = re.compile(r"(\d+)([KMGTP]?)")
_MULT = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


def _split_outside_parens(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def parse_gres(text: str) -> tuple[Gres, ...]:
    """Parse a node's ``Gres=`` value (or sinfo's ``%G``): ``(null)`` is no GRES at all.

    Forms: ``gpu:8``, ``gpu:h100:8``, ``gpu:h100:8(S:0-1)`` (socket affinity, 21.08+),
    ``gpu:a100:no_consume:4``, ``gpu:(null):8(IDX:0-7)``, ``gpu:2K`` (K/M/G multipliers).
    """
    if (text or "").strip() in _NULL:
        return ()
    out: list[Gres] = []
    for entry in _split_outside_parens(text):
        bare = re.sub(r"\([^()]*\)$", "", entry)
        parts = bare.split(":")
        m = _COUNT_RE.fullmatch(parts[-1]) if len(parts) > 1 else None
        digits = parse_int(m.group(1), max_digits=12) if m else None
        count = digits * _MULT[m.group(2)] if m and digits is not None else None
        middle = [p for p in (parts[1:-1] if m else parts[1:]) if p not in ("(null)", "no_consume")]
        out.append(Gres(parts[0], middle[0] if middle else None, count, entry))
    return tuple(out)


def parse_tres(text: str) -> dict[str, str]:
    """``cpu=8,mem=62.50G,billing=8,gres/gpu=8`` -> ``{"cpu": "8", ..., "gres/gpu": "8"}``."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


# ---------------------------------------------------------------------------------------------
# scontrol show config
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SlurmConfig:
    """``scontrol show config`` as ``{key: value}``; values as printed."""

    values: dict[str, str]

    @property
    def cluster_name(self) -> str | None:
        name = self.values.get("ClusterName", "")
        return None if name in _NULL else name

    @property
    def version(self) -> str | None:
        return self.values.get("SLURM_VERSION") or None


def parse_config(text: str) -> SlurmConfig:
    """Parse ``scontrol show config``: ``Key = value`` lines; headers and blank lines skipped."""
    values: dict[str, str] = {}
    for line in slurm_lines(text):
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", key.strip()):
            values.setdefault(key.strip(), value.strip())
    return SlurmConfig(values)


# ---------------------------------------------------------------------------------------------
# scontrol show partition -o
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: str  # Slurm hostlist, "" when the partition has none
    max_time: str  # as printed: "UNLIMITED", "2-00:00:00", ...
    default_time: str
    state: str
    default: bool
    raw: dict[str, str] = field(repr=False, compare=False, default_factory=dict)

    @property
    def max_time_s(self) -> float | None:
        return parse_time(self.max_time)


@dataclass(frozen=True)
class Partitions:
    partitions: tuple[Partition, ...]
    unparsed: tuple[str, ...] = ()

    def get(self, name: str) -> Partition | None:
        return next((p for p in self.partitions if p.name == name), None)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.partitions]


def _partition(kv: dict[str, str]) -> Partition:
    nodes = kv.get("Nodes", "")
    return Partition(kv["PartitionName"], "" if nodes in _NULL else nodes, kv.get("MaxTime", ""),
                     kv.get("DefaultTime", ""), kv.get("State", ""), kv.get("Default") == "YES", kv)


def parse_partitions(text: str) -> Partitions:
    """Parse ``scontrol show partition -o`` (the multi-line form is joined first)."""
    records, unparsed = _records(text, "PartitionName")
    return Partitions(tuple(_partition(kv) for kv in records), unparsed)


# ---------------------------------------------------------------------------------------------
# scontrol show node -o
# ---------------------------------------------------------------------------------------------

# Base states and flags (``State=IDLE+DRAIN``, ``DOWN*``) that keep a node from running jobs.
# Power saving is not among them: a powered-down node (``IDLE+CLOUD+POWERED_DOWN``, sinfo's
# ``idle~``: AWS ParallelCluster's and other clouds' nodes at rest) is resumed by Slurm for the
# job it is given, so it counts as usable; a down or drained one stays unusable by those words.
_UNUSABLE = {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING",
             "MAINTENANCE", "MAINT", "REBOOT_ISSUED", "REBOOT_REQUESTED", "INVALID_REG", "FUTURE",
             "UNKNOWN", "INVAL"}


# A MIG profile in a GRES type: "1g.10gb", "3g.40gb", "1g.10gb+me", or AutoDetect=nvml's
# "nvidia_a100_3g.39gb" (the GPU's name, then the profile)
_MIG_RE = re.compile(r"(?:^|[_-])\d+g\.\d+gb(?:\+me)?$", re.IGNORECASE)
# Words in GRES type names that are not part of the model nvidia-smi prints after "NVIDIA"
_GRES_NOISE = {"nvidia", "tesla", "geforce", "quadro"}


def is_mig_type(gres_type: str | None) -> bool:
    return bool(gres_type and _MIG_RE.search(gres_type))


def _unglue(word: str) -> str:
    """A word with the vendor and brand words glued before the model taken off: GRES types written
    without separators (``nvidiah100pcie``, ``nvidiageforcertx3090``, ``teslav100``)."""
    stripped = True
    while stripped:
        stripped = False
        for noise in _GRES_NOISE:
            if word.startswith(noise) and len(word) > len(noise):
                word, stripped = word[len(noise):], True
    return word


def gpu_model_token(gres_type: str) -> str | None:
    """The model token preflight finds in nvidia-smi's GPU name, from a GRES type name; None
    when the type names no model (``ampere``, ``gpu``).

    The rule: lower-case, split on ``_``/``-``/space, drop the vendor and brand words (nvidia,
    tesla, geforce, quadro); ``rtx``/``gtx`` keep the next word's model number (``RTX 3090``,
    ``RTX A6000``), and ``rtx pro`` is ``RTX PRO`` (``rtxproserver6000``: ``RTX PRO 6000``);
    otherwise the first word that is up to two letters and a number, with one trailing letter
    kept (``A100``, ``H100``, ``GH200``, ``L40S``, ``A10G``, ``T4``).  Memory and form-factor
    words after it (``sxm4``, ``40gb``, ``80gb``, ``hbm3``) are dropped.
    """
    words = [w for w in map(_unglue, re.split(r"[_\-\s]+", gres_type.lower())) if w and w not in _GRES_NOISE]
    for i, word in enumerate(words):
        series = re.fullmatch(r"(rtx|gtx)(pro)?(?:server)?([a-z]?\d+)?\w*", word)
        if series:
            pro, digits, after = series.group(2), series.group(3), words[i + 1:]
            if digits is None and not pro and after[:1] == ["pro"]:
                pro, after = "pro", [w for w in after[1:] if w != "server"]
            if digits is None and after:
                number = re.match(r"[a-z]?\d+", after[0])
                digits = number.group(0) if number else None
            series_name = series.group(1).upper() + (" PRO" if pro else "")
            return f"{series_name} {digits.upper()}" if digits else None
        # a memory size glued after the model ("a10080gbpcie": A100, 80 GB) is not part of its number
        m = re.match(r"[a-z]{0,2}\d{1,3}(?=\d{1,3}gb)", word) or re.match(r"[a-z]{0,2}\d{1,4}", word)
        if m:
            rest = word[m.end():]
            return (m.group(0) + (rest if len(rest) == 1 and rest.isalpha() else "")).upper()
    return None


@dataclass(frozen=True)
class Node:
    """One node as Slurm has it configured and sees it now."""

    name: str
    cpus: int | None  # usable by jobs: CPUEfctv where Slurm prints it (less reserved cores), else CPUTot
    real_memory_mb: int | None
    gres: tuple[Gres, ...]
    features: tuple[str, ...]
    state: str  # as printed: "IDLE", "IDLE+DRAIN", "DOWN*", "MIXED"
    reason: str
    partitions: tuple[str, ...]
    cfg_tres: dict[str, str] = field(compare=False, default_factory=dict)
    cpus_total: int | None = None  # CPUTot: includes the cores CoreSpecCount/CPUSpecList reserve
    mem_spec_mb: int | None = None  # MemSpecLimit: memory reserved for the system, not for jobs

    @property
    def job_memory_mb(self) -> int | None:
        """The memory jobs can have: RealMemory less MemSpecLimit (as CPUEfctv is CPUTot less the
        reserved cores); RealMemory where no limit is set (or one Slurm would reset: not below it)."""
        if self.real_memory_mb is None or not self.mem_spec_mb or self.mem_spec_mb >= self.real_memory_mb:
            return self.real_memory_mb
        return self.real_memory_mb - self.mem_spec_mb

    @property
    def gpus(self) -> int | None:
        """Whole GPUs Slurm schedules on the node; None when it schedules none (no ``gpu`` GRES, or
        ``gpu:0``).  MIG slices (``gpu:1g.10gb:7``) are not whole GPUs and are not counted."""
        whole = [g for g in self.gres if g.name == "gpu" and not is_mig_type(g.type)]
        counts = [g.count for g in whole]
        if counts and all(c is not None for c in counts):
            return sum(c for c in counts if c is not None) or None
        if len(whole) < len([g for g in self.gres if g.name == "gpu"]):
            return None  # MIG slices only: CfgTRES's gres/gpu counts the slices too
        tres = self.cfg_tres.get("gres/gpu", "")  # sites that track gres/gpu as a TRES (AccountingStorageTRES)
        return parse_int(tres, max_digits=12) or None

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The whole-GPU GRES types (MIG slice types left out)."""
        return tuple(sorted({g.type for g in self.gres if g.name == "gpu" and g.type and not is_mig_type(g.type)}))

    @property
    def state_words(self) -> set[str]:
        # "IDLE+DRAIN", "DOWN*" (the star: not responding), "ALLOCATED+DRAIN+DYNAMIC_NORM"
        words = set(re.split(r"[+]", self.state.upper().replace("*", "+NOT_RESPONDING")))
        return {w for w in words if w}

    @property
    def usable(self) -> bool:
        return not (self.state_words & _UNUSABLE)


@dataclass(frozen=True)
class Nodes:
    nodes: tuple[Node, ...]
    unparsed: tuple[str, ...] = ()

    def by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}


def _int(text: str | None) -> int | None:
    return parse_int(text, max_digits=12) if text else None  # ASCII digits, bounded: "²" is no number


def _node(kv: dict[str, str]) -> Node:
    features = kv.get("AvailableFeatures", kv.get("Features", ""))
    parts = kv.get("Partitions", "")
    reason = kv.get("Reason", "")
    return Node(
        name=kv["NodeName"], cpus=_int(kv.get("CPUEfctv")) or _int(kv.get("CPUTot")),
        cpus_total=_int(kv.get("CPUTot")), real_memory_mb=_int(kv.get("RealMemory")),
        mem_spec_mb=_int(kv.get("MemSpecLimit")),
        gres=parse_gres(kv.get("Gres", "")),
        features=tuple(f for f in features.split(",") if f and features not in _NULL),
        state=kv.get("State", ""), reason=re.sub(r"\s*\[[^\]]*@[^\]]*\]$", "", reason),
        partitions=tuple(p for p in parts.split(",") if p and parts not in _NULL),
        cfg_tres=parse_tres(kv.get("CfgTRES", "")))


def parse_nodes(text: str) -> Nodes:
    """Parse ``scontrol show node -o`` (the multi-line form is joined first).

    A line that is not a ``NodeName=`` record, or whose node name is not a host name, is kept in
    ``unparsed``.
    """
    records, unparsed = _records(text, "NodeName")
    named = [kv for kv in records if _host_name(kv["NodeName"])]
    bad = tuple(kv["NodeName"] for kv in records if not _host_name(kv["NodeName"]))
    return Nodes(tuple(_node(kv) for kv in named), unparsed + bad)


def _host_name(name: str) -> bool:
    """A node name that is a host name: anything else (bytes that were not UTF-8, spaces) is
    never written into a site's nodelist."""
    try:
        check_host(name)
    except HostlistError:
        return False
    return True
