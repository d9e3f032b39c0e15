"""Declarative node checks, the one remote script they share, and their evaluation.

A :class:`CheckPlan` is built from a site and a stage: the *sections* of the remote script
(one shell command each, guarded by ``timeout``) and the *checks* that read them (a parser,
a judgement against the site's expectations, a severity).  Each node runs the whole script
once - one connection, one command - and its output is split back into sections by markers
carrying a random token, so nothing a node prints can forge a section boundary.

Paths are read through ``${CLUSTERKIT_SYSROOT:-}`` (empty on real nodes) so a test node can
serve its own sysfs, mount table and storage tree; every value from the site is shell-quoted.
This module knows nothing about SSH: it makes text and judges text.
"""

from __future__ import annotations

import re
import secrets
import shlex
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Callable, Iterable

from clusterkit.preflight import parsers as P
from clusterkit.vocab import STAGE_NAMES

# Only the stage decides which checks apply.
SINGLE, MULTI, LARGE = STAGE_NAMES
STAGES = STAGE_NAMES

# timeout(1) exits 124 when it stopped the command, 137 (128 + KILL) when -k had to kill it.
TIMEOUT_RCS = {"124", "137"}
SKIPPED_RC = "skip"

# Fixed budgets for sections that only read kernel files; nvidia-smi gets a share of the
# command timeout because a GPU that fell off the bus can make it hang for minutes.
_READ_TIMEOUT_S = 5.0


class Severity(str, Enum):
    ERROR = "error"  # a failed check fails the node
    WARN = "warn"  # a failed check is reported, the node stays usable


class Status(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"  # not judged because a check it depends on failed


# ---------------------------------------------------------------------------------------------
# expectations: what the site and stage ask of every node
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StorageExpect:
    path: str
    type: str  # lustre | nfs | gpfs | local
    min_free_gb: float = 0.0
    writable: bool = False  # used for checkpoints
    timeout_s: float = 10.0
    shared: bool | None = None  # seen by every node; None: true for lustre, nfs, gpfs

    @property
    def is_shared(self) -> bool:
        return self.shared if self.shared is not None else self.type in ("lustre", "nfs", "gpfs")


@dataclass(frozen=True)
class Expectations:
    """Everything the checks compare against, taken from a site and a stage."""

    stage: str
    gpus_per_node: int
    gpu_model: str | None = None
    driver_min: str | None = None
    cuda_min: str | None = None
    fabric: str = "ethernet"  # infiniband | roce | ethernet
    hcas: tuple[str, ...] = ()
    port_rate_gbps: float | None = None
    storage: tuple[StorageExpect, ...] = ()
    command_timeout_s: float = 30.0

    @classmethod
    def from_site(cls, site: Any, stage: str) -> "Expectations":
        """Read a :class:`clusterkit.config.site.Site` (duck-typed: this module does not import it)."""
        storage = tuple(
            StorageExpect(s.path, s.type, float(s.min_free_gb), "checkpoints" in s.use, float(s.timeout_s),
                          getattr(s, "shared", None))
            for s in site.storage
        )
        return cls(
            stage=stage,
            gpus_per_node=site.nodes.gpus_per_node,
            gpu_model=site.nodes.gpu_model,
            driver_min=site.software.driver_min,
            cuda_min=site.software.cuda,
            fabric=site.network.fabric,
            hcas=tuple(site.network.hcas),
            port_rate_gbps=site.network.port_rate_gbps,
            storage=storage,
            command_timeout_s=float(site.ssh.command_timeout_s),
        )


# ---------------------------------------------------------------------------------------------
# sections, checks, results
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    """One command of the remote script.  ``command`` is shell text with every value quoted."""

    name: str  # [a-z0-9_]+ : also a shell variable suffix
    command: str
    timeout_s: float
    unless_timed_out: str | None = None  # skip this section if that one timed out (hung mount)


@dataclass(frozen=True)
class SectionOutput:
    """What one section printed (stdout and stderr together) and how it ended."""

    name: str
    text: str
    rc: str | None  # exit status as printed, "skip", or None when the END marker never came

    @property
    def timed_out(self) -> bool:
        return self.rc in TIMEOUT_RCS


@dataclass(frozen=True)
class Verdict:
    passed: bool
    message: str


Judge = Callable[[Any, SectionOutput], Verdict]


@dataclass(frozen=True)
class Check:
    """A declarative check: read ``section``, parse it, judge the result, with a severity."""

    name: str  # e.g. "gpu.count"
    section: str
    parse: Callable[[str], Any]
    judge: Judge
    severity: Severity = Severity.ERROR
    target: str = ""  # what it is about, when a check repeats (a storage path)
    requires: str | None = None  # check name (same target) that must pass, or this one is skipped
    describe: str = ""  # what it verifies, for --json and the docs

    @property
    def key(self) -> str:
        return f"{self.name}:{self.target}" if self.target else self.name


@dataclass(frozen=True)
class CheckResult:
    check: str
    status: Status
    severity: Severity
    message: str
    target: str = ""
    raw: str | None = None  # the text that could not be parsed, kept for the report
    cut: bool = False  # never judged: the remote command ended before its section ran

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"check": self.check, "status": self.status.value, "severity": self.severity.value,
                               "message": self.message}
        if self.target:
            out["target"] = self.target
        if self.raw is not None:
            out["raw"] = self.raw
        if self.cut:
            out["cut"] = True
        return out


@dataclass(frozen=True)
class CheckPlan:
    """The sections to run and the checks to judge, for one site and stage."""

    expect: Expectations
    sections: tuple[Section, ...]
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()  # stage/site level remarks: what was skipped and why
    token: str = field(default_factory=lambda: secrets.token_hex(8))

    @property
    def worst_case_s(self) -> float:
        """Upper bound of the script's run time if every section hits its timeout."""
        return sum(s.timeout_s + 2 for s in self.sections)


# ---------------------------------------------------------------------------------------------
# the remote script
# ---------------------------------------------------------------------------------------------

_PRELUDE = r"""# clusterkit preflight: one script per node, sections delimited by markers.
CK_ROOT=${CLUSTERKIT_SYSROOT:-}
export CK_ROOT
ck_m=%(marker)s
ck_section() {
    # $1 name  $2 timeout (s)  $3 section that must not have timed out ('' = none)  $4 shell text
    printf '\n%%s BEGIN %%s\n' "$ck_m" "$1"
    if [ -n "$3" ] && eval "[ \"\${ck_rc_$3:-}\" = 124 ] || [ \"\${ck_rc_$3:-}\" = 137 ]"; then
        echo "skipped: section $3 timed out"
        ck_rc=skip
    else
        timeout -k 2 "$2" sh -c "$4" </dev/null 2>&1
        ck_rc=$?
    fi
    eval "ck_rc_$1=\$ck_rc"
    printf '\n%%s END %%s %%s\n' "$ck_m" "$1" "$ck_rc"
}
"""


def _seconds(t: float) -> str:
    return f"{max(t, 0.1):g}"


def build_script(plan: CheckPlan) -> str:
    """The POSIX sh script every node runs: the prelude, then one ``ck_section`` per section."""
    marker = f"@@ck-{plan.token}@@"
    lines = [_PRELUDE % {"marker": shlex.quote(marker)}]
    for s in plan.sections:
        if not re.fullmatch(r"[a-z0-9_]+", s.name):
            raise ValueError(f"section name {s.name!r} must be [a-z0-9_]+")  # a bug, not user input
        lines.append(
            f"ck_section {s.name} {_seconds(s.timeout_s)} {shlex.quote(s.unless_timed_out or '')} {shlex.quote(s.command)}"
        )
    return "\n".join(lines) + "\n"


def split_sections(stdout: str, token: str) -> dict[str, SectionOutput]:
    """Split a node's output back into sections; a section without END was cut off (rc None)."""
    marker = re.escape(f"@@ck-{token}@@")
    begin_re = re.compile(rf"{marker} BEGIN ([a-z0-9_]+)")
    end_re = re.compile(rf"{marker} END ([a-z0-9_]+) (\S+)")
    out: dict[str, SectionOutput] = {}
    current: str | None = None
    body: list[str] = []
    for line in stdout.splitlines():
        b, e = begin_re.fullmatch(line), end_re.fullmatch(line)
        if b:
            if current is not None:  # BEGIN without END: the previous section never finished
                out[current] = SectionOutput(current, "\n".join(body).strip("\n"), None)
            current, body = b.group(1), []
        elif e and e.group(1) == current:
            # the prelude prints a newline before END, so drop the one blank line it adds
            text = "\n".join(body[:-1] if body and body[-1] == "" else body)
            out[current] = SectionOutput(current, text, e.group(2))
            current, body = None, []
        elif current is not None:
            body.append(line)
    if current is not None:
        out[current] = SectionOutput(current, "\n".join(body).strip("\n"), None)
    return out


# ---------------------------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------------------------


def _result(check: Check, passed: bool, message: str, raw: str | None = None) -> CheckResult:
    if passed:
        status = Status.OK
    else:
        status = Status.FAIL if check.severity is Severity.ERROR else Status.WARN
    return CheckResult(check.name, status, check.severity, message, check.target, raw)


def _section_problem(check: Check, out: SectionOutput | None, plan: CheckPlan, cut_reason: str) -> str | None:
    """Why a section's output cannot be judged at all (missing, cut off, timed out), or None."""
    section = next(s for s in plan.sections if s.name == check.section)
    if out is None:
        return f"not checked: {cut_reason}"
    if out.rc is None:
        return f"cut off while running ({cut_reason})"
    if out.timed_out:
        return f"no answer within {_seconds(section.timeout_s)} s"
    if out.rc == SKIPPED_RC:
        return out.text.strip() or "skipped"
    return None


def evaluate(plan: CheckPlan, stdout: str, cut_reason: str = "the remote command ended early") -> list[CheckResult]:
    """Judge every check of ``plan`` against one node's script output.

    ``cut_reason`` says why sections may be missing (e.g. "remote command timed out after 30 s").
    Each section is parsed once; a ParseFailure fails every check reading it, raw text kept.
    """
    sections = split_sections(stdout, plan.token)
    parsed: dict[str, Any] = {}
    results: list[CheckResult] = []
    by_key: dict[str, CheckResult] = {}
    for check in plan.checks:
        if check.requires is not None:
            dep = by_key.get(f"{check.requires}:{check.target}" if check.target else check.requires)
            if dep is not None and dep.status is not Status.OK:
                res = CheckResult(check.name, Status.SKIP, check.severity, f"not judged: {dep.check} failed", check.target)
                results.append(res)
                by_key[check.key] = res
                continue
        out = sections.get(check.section)
        problem = _section_problem(check, out, plan, cut_reason)
        if problem is not None or out is None:
            problem = f"{check.target}: {problem}" if check.target else (problem or "not checked")
            if out is not None and out.rc == SKIPPED_RC:  # its section was not run: another one hung
                res = CheckResult(check.name, Status.SKIP, check.severity, problem, check.target)
            else:
                res = replace(_result(check, False, problem), cut=out is None or out.rc is None)
        else:
            if check.section not in parsed:
                parsed[check.section] = check.parse(out.text)
            value = parsed[check.section]
            if isinstance(value, P.ParseFailure):
                msg = value.reason if value.tool_error else f"could not parse {value.what}: {value.reason}"
                res = _result(check, False, msg, value.raw)
            else:
                verdict = check.judge(value, out)
                res = _result(check, verdict.passed, verdict.message)
        results.append(res)
        by_key[check.key] = res
    return results


# ---------------------------------------------------------------------------------------------
# the catalogue of checks
# ---------------------------------------------------------------------------------------------


def _identity(text: str) -> str:
    return text


def _gpu_sections(e: Expectations) -> list[Section]:
    t = min(20.0, max(2.0, e.command_timeout_s / 3))
    fields = ",".join(P.GPU_QUERY_FIELDS)
    return [
        Section("gpu", f"nvidia-smi --query-gpu={fields} --format=csv,noheader", t),
        # `--version` is cheap and prints "CUDA Version : X.Y" on drivers >= 525; older ones
        # only show it in the plain table header.
        Section("cuda", "v=$(nvidia-smi --version 2>/dev/null); "
                'case "$v" in *"CUDA Version"*) echo "$v" ;; *) nvidia-smi ;; esac', t, unless_timed_out="gpu"),
    ]


def _judge_gpu_present(q: P.GpuQuery, out: SectionOutput) -> Verdict:
    if q.state is P.GpuState.NOT_INSTALLED:
        return Verdict(False, "nvidia-smi not found (no NVIDIA driver installed?)")
    if q.state is P.GpuState.NO_DEVICES:
        return Verdict(False, f"nvidia-smi: {q.message}")
    if q.state is P.GpuState.DRIVER_FAILED:
        return Verdict(False, f"nvidia-smi failed: {q.message}")
    if not q.gpus:
        return Verdict(False, "nvidia-smi listed no GPUs")
    return Verdict(True, f"{len(q.gpus)} GPUs")


def _judge_persistence(q: P.GpuQuery, _: SectionOutput) -> Verdict:
    off = [str(g.index) for g in q.gpus if g.persistence_mode is False]
    # without persistence mode the driver tears down GPU state between processes, so
    # every rank pays seconds of CUDA init and first collectives can time out
    return Verdict(not off, "persistence mode on" if not off else f"persistence mode off on GPU {','.join(off)}")


def _judge_ecc(q: P.GpuQuery, _: SectionOutput) -> Verdict:
    errs = [f"GPU {g.index}: {g.ecc_uncorrected}" for g in q.gpus if g.ecc_uncorrected]
    unreadable = [str(g.index) for g in q.gpus if g.ecc_unreadable]
    if errs:
        return Verdict(False, "uncorrected ECC errors (" + ", ".join(errs) + ")")
    if unreadable:
        return Verdict(False, f"ECC counter unreadable (ERR!) on GPU {','.join(unreadable)}")
    na = all(g.ecc_uncorrected is None for g in q.gpus)
    return Verdict(True, "ECC not reported by these GPUs" if na else "no uncorrected ECC errors")


def _judge_mig(q: P.GpuQuery, _: SectionOutput) -> Verdict:
    on = [str(g.index) for g in q.gpus if (g.mig_mode or "").lower() == "enabled"]
    # NCCL cannot communicate between MIG instances, and a MIG GPU shows up as slices
    return Verdict(not on, "MIG disabled" if not on else f"MIG enabled on GPU {','.join(on)}")


def _gpu_checks(e: Expectations) -> list[Check]:
    def count(q: P.GpuQuery, _: SectionOutput) -> Verdict:
        n = len(q.gpus)
        return Verdict(n == e.gpus_per_node, f"{n} GPUs" + ("" if n == e.gpus_per_node else f", expected {e.gpus_per_node}"))

    def model(q: P.GpuQuery, _: SectionOutput) -> Verdict:
        want = (e.gpu_model or "").lower()
        bad = sorted({g.name for g in q.gpus if want not in g.name.lower()})
        names = ", ".join(sorted({g.name for g in q.gpus}))
        return Verdict(not bad, names if not bad else f"GPU model {', '.join(bad)}, expected {e.gpu_model}")

    def driver(q: P.GpuQuery, _: SectionOutput) -> Verdict:
        versions = sorted(q.driver_versions)
        if not versions:
            return Verdict(False, "nvidia-smi reported no driver version")
        if e.driver_min is None:
            return Verdict(len(versions) == 1, f"driver {', '.join(versions)}")
        old = [v for v in versions if not P.version_at_least(v, e.driver_min)]
        return Verdict(not old, f"driver {', '.join(old or versions)}" + (f" < {e.driver_min} required" if old else ""))

    def cuda(version: str, _: SectionOutput) -> Verdict:
        if e.cuda_min is None:
            return Verdict(True, f"CUDA {version}")
        ok = P.version_at_least(version, e.cuda_min)
        return Verdict(bool(ok), f"CUDA {version}" + ("" if ok else f" < {e.cuda_min} required"))

    g = P.parse_gpu_query
    checks = [
        Check("gpu.present", "gpu", g, _judge_gpu_present, describe="nvidia-smi runs and lists GPUs"),
        Check("gpu.count", "gpu", g, count, requires="gpu.present", describe="GPU count == nodes.gpus_per_node"),
        Check("gpu.driver", "gpu", g, driver, requires="gpu.present", describe="driver >= software.driver_min"),
    ]
    if e.gpu_model:
        checks.append(Check("gpu.model", "gpu", g, model, requires="gpu.present", describe="GPU name contains nodes.gpu_model"))
    checks += [
        Check("gpu.persistence", "gpu", g, _judge_persistence, Severity.WARN, requires="gpu.present", describe="persistence mode on"),
        Check("gpu.ecc", "gpu", g, _judge_ecc, requires="gpu.present", describe="no uncorrected volatile ECC errors"),
        Check("gpu.mig", "gpu", g, _judge_mig, requires="gpu.present", describe="MIG disabled (NCCL does not span MIG slices)"),
    ]
    if e.cuda_min:
        checks.append(Check("gpu.cuda", "cuda", P.parse_cuda_version, cuda, requires="gpu.present",
                            describe="driver's CUDA version >= software.cuda"))
    return checks


_IB_ATTRS = ("state", "phys_state", "rate", "link_layer")


def _ib_sections() -> list[Section]:
    globs = " ".join(f'"$CK_ROOT"/sys/class/infiniband/*/ports/*/{a}' for a in _IB_ATTRS)
    ib = (f'if [ -d "$CK_ROOT/sys/class/infiniband" ]; then grep -H "" {globs} 2>/dev/null; '
          'elif [ -z "$CK_ROOT" ] && command -v ibstat >/dev/null 2>&1; then ibstat; fi; true')
    modules = ('if [ -d "$CK_ROOT/sys/module" ]; then for m in nvidia_peermem nv_peer_mem; do '
               '[ -d "$CK_ROOT/sys/module/$m" ] && echo "/sys/module/$m"; done; else lsmod; fi; true')
    return [Section("ib", ib, _READ_TIMEOUT_S), Section("modules", modules, _READ_TIMEOUT_S)]


def _wanted_ports(e: Expectations, inv: P.IbInventory) -> tuple[list[str], list[P.IbPort]]:
    """(missing HCA names, ports to judge).  ``mlx5_0:1`` names one port, ``mlx5_0`` all of them."""
    missing: list[str] = []
    ports: list[P.IbPort] = []
    for spec in e.hcas:
        hca, _, port = spec.partition(":")
        found = [p for p in inv.ports_of(hca) if not port or str(p.port) == port]
        if not found:
            missing.append(spec)
        ports.extend(found)
    return missing, ports


def _ib_checks(e: Expectations) -> list[Check]:
    want_layer = "InfiniBand" if e.fabric == "infiniband" else "Ethernet"

    def hcas(inv: P.IbInventory, _: SectionOutput) -> Verdict:
        missing, _ports = _wanted_ports(e, inv)
        found = ", ".join(inv.hcas) or "none"
        return Verdict(not missing, f"HCAs {', '.join(e.hcas)} present" if not missing
                       else f"HCA {', '.join(missing)} missing (found: {found})")

    def ports(inv: P.IbInventory, _: SectionOutput) -> Verdict:
        bad = [f"{p.label} {p.state or '?'}" + (f" ({p.phys_state})" if p.phys_state and p.phys_state != "LinkUp" else "")
               for p in _wanted_ports(e, inv)[1] if p.state != "ACTIVE" or p.phys_state not in (None, "LinkUp")]
        return Verdict(not bad, "ports ACTIVE/LinkUp" if not bad else ", ".join(bad))

    def rate(inv: P.IbInventory, _: SectionOutput) -> Verdict:
        need = e.port_rate_gbps or 0
        slow = [f"{p.label} {p.rate_gbps:g} Gb/s" if p.rate_gbps is not None else f"{p.label} rate unknown"
                for p in _wanted_ports(e, inv)[1] if p.rate_gbps is None or p.rate_gbps < need]
        return Verdict(not slow, f"rate >= {need:g} Gb/s" if not slow else f"{', '.join(slow)} < {need:g} Gb/s")

    def layer(inv: P.IbInventory, _: SectionOutput) -> Verdict:
        wrong = [f"{p.label} {p.link_layer or '?'}" for p in _wanted_ports(e, inv)[1] if p.link_layer != want_layer]
        return Verdict(not wrong, f"link layer {want_layer}" if not wrong
                       else f"link layer {', '.join(wrong)}, expected {want_layer} for fabric {e.fabric}")

    def peermem(mods: frozenset[str], _: SectionOutput) -> Verdict:
        loaded = sorted(mods & {"nvidia_peermem", "nv_peer_mem"})
        # without it NCCL still runs over IB but stages every GPU buffer through host memory
        return Verdict(bool(loaded), f"{loaded[0]} loaded" if loaded else "nvidia_peermem not loaded (no GPUDirect RDMA)")

    ib = P.parse_ib
    checks = [
        Check("ib.hcas", "ib", ib, hcas, describe="configured HCAs present"),
        Check("ib.ports", "ib", ib, ports, requires="ib.hcas", describe="ports ACTIVE and LinkUp"),
        Check("ib.link_layer", "ib", ib, layer, requires="ib.hcas", describe="link layer matches network.fabric"),
    ]
    if e.port_rate_gbps:
        checks.insert(2, Check("ib.rate", "ib", ib, rate, requires="ib.hcas", describe="port rate >= network.port_rate_gbps"))
    checks.append(Check("ib.peermem", "modules", P.parse_modules, peermem, Severity.WARN,
                        describe="nvidia_peermem loaded (GPUDirect RDMA)"))
    return checks


# Kernel file-system type names per configured storage type.
_FSTYPES = {"lustre": {"lustre"}, "nfs": {"nfs", "nfs4"}, "gpfs": {"gpfs"}}


def _storage_sections(items: list[tuple[int, StorageExpect]]) -> list[Section]:
    sections = [Section("mounts", 'cat "$CK_ROOT/proc/mounts"', _READ_TIMEOUT_S)]
    for i, s in items:
        path = f'"$CK_ROOT"{shlex.quote(s.path)}'
        sections.append(Section(f"df_{i}", f"df -P -k -- {path}", s.timeout_s))
        if s.writable:
            probe = (f'f={path}/.clusterkit-preflight.$(uname -n).$$ && : > "$f" && rm -f -- "$f" '
                     '&& echo writable')
            sections.append(Section(f"write_{i}", probe, s.timeout_s, unless_timed_out=f"df_{i}"))
    return sections


def _storage_checks(e: Expectations, items: list[tuple[int, StorageExpect]]) -> list[Check]:
    checks: list[Check] = []
    for i, s in items:
        checks += _checks_for_path(e, i, s)
    return checks


def _checks_for_path(e: Expectations, i: int, s: StorageExpect) -> list[Check]:
    def mounted(mounts: tuple[P.Mount, ...], _: SectionOutput) -> Verdict:
        m = P.find_mount(mounts, s.path)
        if s.type == "local":
            return Verdict(m is not None, f"{s.path} on {m.fstype if m else '?'}")
        if m is None or m.fstype not in _FSTYPES[s.type]:
            where = f"only {m.mountpoint} ({m.fstype})" if m else "nothing"
            return Verdict(False, f"{s.path} not mounted as {s.type} ({where} serves it)")
        return Verdict(True, f"{s.path} mounted ({m.fstype} from {m.source})")

    def nfs_at_scale(mounts: tuple[P.Mount, ...], _: SectionOutput) -> Verdict:
        m = P.find_mount(mounts, s.path)
        nfs = m is not None and m.fstype in _FSTYPES["nfs"]
        # hundreds of ranks opening files at once swamp a single NFS server's metadata path
        return Verdict(not nfs, f"{s.path} is NFS: at large-cluster scale prefer Lustre/GPFS" if nfs
                       else f"{s.path} is not NFS")

    def free(d: P.DiskSpace, _: SectionOutput) -> Verdict:
        ok = d.available_gb >= s.min_free_gb
        msg = f"{s.path} {d.available_gb:,.0f} GB free"
        return Verdict(ok, msg if ok else f"{msg} < {s.min_free_gb:g} GB required")

    def writable(_text: str, out: SectionOutput) -> Verdict:
        ok = out.rc == "0" and "writable" in out.text
        return Verdict(ok, f"{s.path} writable" if ok else f"{s.path} not writable: {P.first_line(out.text) or 'rc ' + str(out.rc)}")

    checks = [Check("storage.mounted", "mounts", P.parse_mounts, mounted, target=s.path,
                    describe=f"{s.path} mounted as {s.type}")]
    if e.stage == LARGE and s.type == "nfs":
        checks.append(Check("storage.nfs_at_scale", "mounts", P.parse_mounts, nfs_at_scale, Severity.WARN,
                            target=s.path, describe="large-cluster stage: warn on NFS"))
    checks.append(Check("storage.free", f"df_{i}", P.parse_df, free, target=s.path, requires="storage.mounted",
                        describe=f"answers within {s.timeout_s:g} s with >= {s.min_free_gb:g} GB free"))
    if s.writable:
        checks.append(Check("storage.writable", f"write_{i}", _identity, writable, target=s.path,
                            requires="storage.mounted", describe="writable (used for checkpoints)"))
    return checks


def plan_checks(expect: Expectations) -> CheckPlan:
    """Choose sections and checks for a stage: single-node skips IB and shared storage,
    ethernet sites skip IB, large-cluster adds the NFS warning."""
    if expect.stage not in STAGES:
        raise ValueError(f"unknown stage {expect.stage!r}")  # callers validate user input first
    sections: list[Section] = _gpu_sections(expect)
    checks: list[Check] = _gpu_checks(expect)
    notes: list[str] = []
    if expect.stage == SINGLE:
        notes.append("single-node stage: InfiniBand and shared-storage checks skipped")
    elif expect.fabric == "ethernet":
        notes.append("network.fabric is ethernet: InfiniBand checks skipped (NCCL will use TCP sockets)")
    else:
        sections += _ib_sections()
        checks += _ib_checks(expect)
    items = [(i, s) for i, s in enumerate(expect.storage) if expect.stage != SINGLE or not s.is_shared]
    if items:
        sections += _storage_sections(items)
        checks += _storage_checks(expect, items)
    return CheckPlan(expect, tuple(sections), tuple(checks), tuple(notes))


def describe_checks(plan: CheckPlan) -> list[dict[str, str]]:
    """The plan's checks as data (for --json and documentation)."""
    return [{"check": c.name, "target": c.target, "severity": c.severity.value, "what": c.describe}
            for c in plan.checks]


def failed(results: Iterable[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.status is Status.FAIL]
