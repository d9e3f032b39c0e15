"""The catalogue of node checks: what a site and stage ask of every node (:class:`Expectations`),
and the sections and checks that verify it - GPUs and driver, InfiniBand/RoCE ports and
GPUDirect, mounts, free space and writability of the site's storage.

:func:`select_checks` chooses them for a stage; the engine (:mod:`clusterkit.preflight.engine`)
runs and judges them.  Every value from the site is shell-quoted.  To add a check: write its
section (if it reads something new) and a :class:`~clusterkit.preflight.engine.Check` with a
parser from :mod:`~clusterkit.nodes.parsers` and a judge returning a ``Verdict``, then add
both in :func:`select_checks` for the stages it applies to.
"""

from __future__ import annotations

from clusterkit.nodes import device_parsers as D
from clusterkit.nodes import parsers as P
from clusterkit.nodes import sections as S
from clusterkit.nodes.script import Section, SectionOutput
from clusterkit.preflight import capacity
from clusterkit.preflight.engine import SINGLE, Check, CheckSet, Severity, Verdict
from clusterkit.preflight.expect import Expectations as Expectations  # re-exported
from clusterkit.preflight.expect import StorageExpect as StorageExpect  # re-exported
from clusterkit.preflight.health import health_parts
from clusterkit.preflight.storage import storage_checks, storage_sections
from clusterkit.vocab import STAGE_NAMES

# ---------------------------------------------------------------------------------------------
# the catalogue of checks
# ---------------------------------------------------------------------------------------------


def _gpu_sections(e: Expectations) -> list[Section]:
    t = min(20.0, max(2.0, e.command_timeout_s / 3))
    return [S.gpu_section(t), S.cuda_section(t)]


def _judge_gpu_present(q: D.GpuQuery, out: SectionOutput) -> Verdict:
    if q.state is D.GpuState.NOT_INSTALLED:
        return Verdict(False, "nvidia-smi not found (no NVIDIA driver installed?)")
    if q.state is D.GpuState.NO_DEVICES:
        return Verdict(False, f"nvidia-smi: {q.message}")
    if q.state is D.GpuState.DRIVER_FAILED:
        return Verdict(False, f"nvidia-smi failed: {q.message}")
    if not q.gpus:
        return Verdict(False, "nvidia-smi listed no GPUs")
    return Verdict(True, f"{len(q.gpus)} GPUs")


def _judge_persistence(q: D.GpuQuery, _: SectionOutput) -> Verdict:
    off = [str(g.index) for g in q.gpus if g.persistence_mode is False]
    # without persistence mode the driver tears down GPU state between processes, so
    # every rank pays seconds of CUDA init and first collectives can time out
    return Verdict(not off, "persistence mode on" if not off else f"persistence mode off on GPU {','.join(off)}")


def _judge_ecc(q: D.GpuQuery, _: SectionOutput) -> Verdict:
    errs = [f"GPU {g.index}: {g.ecc_uncorrected}" for g in q.gpus if g.ecc_uncorrected]
    unreadable = [str(g.index) for g in q.gpus if g.ecc_unreadable]
    if errs:
        return Verdict(False, "uncorrected ECC errors (" + ", ".join(errs) + ")")
    if unreadable:
        return Verdict(False, f"ECC counter unreadable (ERR!) on GPU {','.join(unreadable)}")
    na = all(g.ecc_uncorrected is None for g in q.gpus)
    return Verdict(True, "ECC not reported by these GPUs" if na else "no uncorrected ECC errors")


def _judge_mig(q: D.GpuQuery, _: SectionOutput) -> Verdict:
    on = [str(g.index) for g in q.gpus if (g.mig_mode or "").lower() == "enabled"]
    # NCCL cannot communicate between MIG instances, and a MIG GPU shows up as slices
    return Verdict(not on, "MIG disabled" if not on else f"MIG enabled on GPU {','.join(on)}")


def _gpu_checks(e: Expectations) -> list[Check]:
    def count(q: D.GpuQuery, _: SectionOutput) -> Verdict:
        n = len(q.gpus)
        ok = n == e.gpus_per_node
        return Verdict(ok, f"{n} GPUs" + ("" if ok else f", expected {e.gpus_per_node}"))

    def model(q: D.GpuQuery, _: SectionOutput) -> Verdict:
        want = (e.gpu_model or "").lower()
        bad = sorted({g.name for g in q.gpus if want not in g.name.lower()})
        names = ", ".join(sorted({g.name for g in q.gpus}))
        return Verdict(not bad, names if not bad else f"GPU model {', '.join(bad)}, expected {e.gpu_model}")

    def driver(q: D.GpuQuery, _: SectionOutput) -> Verdict:
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

    g = D.parse_gpu_query
    checks = [
        Check("gpu.present", "gpu", g, _judge_gpu_present, describe="nvidia-smi runs and lists GPUs"),
        Check("gpu.count", "gpu", g, count, requires="gpu.present", describe="GPU count == nodes.gpus_per_node"),
        Check("gpu.driver", "gpu", g, driver, requires="gpu.present", describe="driver >= software.driver_min"),
    ]
    if e.gpu_model:
        checks.append(Check("gpu.model", "gpu", g, model, requires="gpu.present",
                            describe="GPU name contains nodes.gpu_model"))
    checks += [
        Check("gpu.persistence", "gpu", g, _judge_persistence, Severity.WARN, requires="gpu.present",
              describe="persistence mode on"),
        Check("gpu.ecc", "gpu", g, _judge_ecc, requires="gpu.present", describe="no uncorrected volatile ECC errors"),
        Check("gpu.mig", "gpu", g, _judge_mig, requires="gpu.present",
              describe="MIG disabled (NCCL does not span MIG slices)"),
    ]
    if e.cuda_min:
        checks.append(Check("gpu.cuda", "cuda", D.parse_cuda_version, cuda, requires="gpu.present",
                            describe="driver's CUDA version >= software.cuda"))
    return checks


def _wanted_ports(e: Expectations, inv: D.IbInventory) -> tuple[list[str], list[D.IbPort]]:
    """(missing HCA names, ports to judge)."""
    missing: list[str] = []
    ports: list[D.IbPort] = []
    for spec in e.hcas:
        found = S.hca_ports(inv, spec)
        if not found:
            missing.append(spec)
        ports.extend(found)
    return missing, ports


def _ib_checks(e: Expectations) -> list[Check]:
    want_layer = "InfiniBand" if e.fabric == "infiniband" else "Ethernet"

    def hcas(inv: D.IbInventory, _: SectionOutput) -> Verdict:
        missing, _ports = _wanted_ports(e, inv)
        found = ", ".join(inv.hcas) or "none"
        # ibstat stopped at a device it could not read: that device is missing, and any listed after it
        stopped = f"; {inv.errors[-1]}" if inv.errors else ""
        unread = [h for h in inv.missing if h not in missing]
        if not missing and unread:
            return Verdict(True, f"HCAs {', '.join(e.hcas)} present (ibstat could not read {', '.join(unread)})")
        return Verdict(not missing, f"HCAs {', '.join(e.hcas)} present" if not missing
                       else f"HCA {', '.join(missing)} missing (found: {found}{stopped})")

    def ports(inv: D.IbInventory, _: SectionOutput) -> Verdict:
        def why(p: D.IbPort) -> str:
            link_down = p.phys_state and p.phys_state != "LinkUp"
            return f"{p.label} {p.state or '?'}" + (f" ({p.phys_state})" if link_down else "")

        bad = [why(p) for p in _wanted_ports(e, inv)[1] if p.state != "ACTIVE" or p.phys_state not in (None, "LinkUp")]
        return Verdict(not bad, "ports ACTIVE/LinkUp" if not bad else ", ".join(bad))

    def rate(inv: D.IbInventory, _: SectionOutput) -> Verdict:
        need = e.port_rate_gbps or 0
        slow = [f"{p.label} {p.rate_gbps:g} Gb/s" if p.rate_gbps is not None else f"{p.label} rate unknown"
                for p in _wanted_ports(e, inv)[1] if p.rate_gbps is None or p.rate_gbps < need]
        return Verdict(not slow, f"rate >= {need:g} Gb/s" if not slow else f"{', '.join(slow)} < {need:g} Gb/s")

    def layer(inv: D.IbInventory, _: SectionOutput) -> Verdict:
        wrong = [f"{p.label} {p.link_layer or '?'}" for p in _wanted_ports(e, inv)[1] if p.link_layer != want_layer]
        return Verdict(not wrong, f"link layer {want_layer}" if not wrong
                       else f"link layer {', '.join(wrong)}, expected {want_layer} for fabric {e.fabric}")

    def peermem(mods: frozenset[str], _: SectionOutput) -> Verdict:
        loaded = sorted(mods & {"nvidia_peermem", "nv_peer_mem"})
        # without it NCCL still runs over IB but stages every GPU buffer through host memory
        return Verdict(bool(loaded),
                       f"{loaded[0]} loaded" if loaded else "nvidia_peermem not loaded (no GPUDirect RDMA)")

    ib = D.parse_ib
    checks = [
        Check("ib.hcas", "ib", ib, hcas, describe="configured HCAs present"),
        Check("ib.ports", "ib", ib, ports, requires="ib.hcas", describe="ports ACTIVE and LinkUp"),
        Check("ib.link_layer", "ib", ib, layer, requires="ib.hcas", describe="link layer matches network.fabric"),
    ]
    if e.port_rate_gbps:
        checks.insert(2, Check("ib.rate", "ib", ib, rate, requires="ib.hcas",
                               describe="port rate >= network.port_rate_gbps"))
    checks.append(Check("ib.peermem", "modules", P.parse_modules, peermem, Severity.WARN,
                        describe="nvidia_peermem loaded (GPUDirect RDMA)"))
    return checks


def _judge_memlock(lim: P.Limit, _: SectionOutput) -> Verdict:
    # ibv_reg_mr pins every buffer NCCL registers; under a low memlock limit it fails (or NCCL
    # falls back to slower paths).  The job raises the soft limit to the hard one itself.
    def kib(v: int) -> str:
        return f"{v // 1024:,} KiB"

    if lim.hard is not None:
        return Verdict(False, f"locked memory limited to {kib(lim.hard)} (hard limit): RDMA cannot register "
                              "large buffers; set memlock unlimited (limits.conf, slurmd's LimitMEMLOCK)")
    if lim.soft is not None:
        return Verdict(True, f"locked memory {kib(lim.soft)}, hard limit unlimited: the job raises it")
    return Verdict(True, "locked memory unlimited")


def _gid_checks(e: Expectations) -> list[Check]:
    index = e.gid_index

    def gid(entries: tuple[P.Gid, ...], _: SectionOutput) -> Verdict:
        bad: list[str] = []
        for spec in e.hcas:
            hca, _sep, port = spec.partition(":")
            mine = [g for g in entries if g.hca == hca and (not port or str(g.port) == port)]
            if not mine:
                bad.append(f"{spec} GID {index} unset")
            for g in mine:
                if g.type is None or g.gid is None:
                    bad.append(f"{g.label} unset")
                elif g.type != "RoCE v2":
                    bad.append(f"{g.label} is {g.type}, not RoCE v2")
                elif not g.ipv4_mapped:
                    bad.append(f"{g.label} is {g.gid}, not IPv4-mapped")
        return Verdict(not bad, f"GID {index} is RoCE v2, IPv4-mapped on {', '.join(e.hcas)}" if not bad
                       else ", ".join(bad) + " (NCCL_IB_GID_INDEX would hang or fail with RETRY_EXC_ERR)")

    return [Check("roce.gid", "gid", P.parse_gids, gid, requires="ib.hcas",
                  describe="network.roce.gid_index is RoCE v2 and IPv4-mapped on every HCA port")]


def _ifname_check(e: Expectations) -> Check:
    name = e.socket_ifname or ""

    def judge(a: P.IfAddr, _: SectionOutput) -> Verdict:
        if not a.exists:
            return Verdict(False, f"interface {name} does not exist (network.socket_ifname; NCCL_SOCKET_IFNAME)")
        if not a.addrs:
            return Verdict(False, f"interface {name} has no IPv4 address: NCCL cannot bootstrap over it")
        return Verdict(True, f"{name} {', '.join(a.addrs)}")

    return Check("net.socket_ifname", "ifaddr", P.parse_ipv4, judge,
                 describe="network.socket_ifname exists with an IPv4 address")


def select_checks(expect: Expectations) -> CheckSet:
    """Choose sections and checks for a stage: single-node skips IB and shared storage,
    ethernet sites skip IB, large-cluster adds the NFS warning."""
    if expect.stage not in STAGE_NAMES:
        raise ValueError(f"unknown stage {expect.stage!r}")  # callers validate user input first
    sections: list[Section] = _gpu_sections(expect)
    checks: list[Check] = _gpu_checks(expect)
    notes: list[str] = []
    if expect.stage == SINGLE:
        notes.append("single-node stage: InfiniBand and shared-storage checks skipped")
    elif expect.fabric == "ethernet":
        notes.append("network.fabric is ethernet: InfiniBand checks skipped (NCCL will use TCP sockets)")
    elif expect.fabric == "efa":
        notes.append("network.fabric is efa: InfiniBand checks skipped (the aws-ofi-nccl plugin finds the devices)")
    else:
        sections += [S.ib_section(), S.modules_section()]
        checks += _ib_checks(expect)
        if expect.fabric == "roce" and expect.gid_index is not None:
            sections.append(S.gid_section(expect.gid_index))
            checks += _gid_checks(expect)
    if expect.stage != SINGLE and expect.fabric != "ethernet":
        sections.append(S.limits_section())
        checks.append(Check("limits.memlock", "limits", P.parse_memlock, _judge_memlock, Severity.WARN,
                            describe="locked memory unlimited, or raisable to it (RDMA registers buffers)"))
    if expect.stage != SINGLE and expect.socket_ifname:
        sections.append(S.ipv4_section(expect.socket_ifname))
        checks.append(_ifname_check(expect))
    items = [(i, s) for i, s in enumerate(expect.storage) if expect.stage != SINGLE or not s.shared]
    if items:
        sections += storage_sections(items)
        checks += storage_checks(expect.stage, items)
    if expect.checkpoint is not None:   # on every stage: a single node's checkpoints need room too
        sections.append(capacity.section(expect.checkpoint, min(60.0, max(5.0, expect.command_timeout_s / 3))))
        checks += capacity.checks(expect.checkpoint)
    ib = expect.stage != SINGLE and expect.fabric in ("infiniband", "roce")
    health_sections, health_checks = health_parts(expect, ib=ib)  # GPU memory, Xid, PCIe, NVLink, clocks
    sections += health_sections
    checks += health_checks
    return CheckSet(tuple(sections), tuple(checks), tuple(notes))

