"""The deeper health checks: faults that end large runs and that the basic checks do not see -
GPU memory rows waiting for remapping, Xid events since boot, a PCIe link trained below the
GPU's maximum, NVLink links down or their error counters rising, clocks slowed by the hardware,
InfiniBand error counters rising while preflight watches.  :func:`health_parts` gives the catalogue their sections and
checks; each judge names the GPU (PCI bus id) or port it fails."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clusterkit.nodes import health_sections as H
from clusterkit.nodes import xid as X
from clusterkit.nodes.health_parsers import (
    CounterReads,
    KernelLog,
    NvlinkErrorReads,
    NvlinkStatus,
    parse_ib_counters,
    parse_nvlink,
    parse_nvlink_errors,
    parse_xid_log,
)
from clusterkit.nodes.script import Section, SectionOutput
from clusterkit.nodes.smi_query import SmiQuery, parse_smi_query
from clusterkit.preflight.engine import Check, Judge, Severity, Verdict

if TYPE_CHECKING:
    from clusterkit.preflight.expect import Expectations

_YES = "yes"
_READ_ANSWERS = {"yes", "no", "n/a", "[n/a]", "not supported", "[not supported]"}


def _listing(items: list[str], limit: int = 8) -> str:
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def judge_row_remap(q: SmiQuery, _: SectionOutput) -> Verdict:
    bad: list[str] = []
    unread: list[str] = []
    for g in q.gpus:
        if (g.remap_failure or "").lower() == _YES:
            bad.append(f"GPU {g.bus_id}: row remapping failed (the GPU needs replacing)")
        elif (g.remap_pending or "").lower() == _YES:
            rows = f", {g.remap_uncorrectable} uncorrectable" if g.remap_uncorrectable not in (None, "0") else ""
            bad.append(f"GPU {g.bus_id}: row remapping pending{rows} (reset the GPU)")
        elif g.remap_pending is not None and g.remap_pending.lower() not in _READ_ANSWERS:
            unread.append(f"GPU {g.bus_id}: Remapped Rows Pending {g.remap_pending!r} unreadable")
        if (g.retired_pending or "").lower() == _YES:
            bad.append(f"GPU {g.bus_id}: retired pages pending (reset the GPU)")
    if bad or unread:
        return Verdict(False, _listing(bad + unread))
    reported = [g for g in q.gpus if g.remap_pending not in (None, "N/A") or g.retired_pending not in (None, "N/A")]
    return Verdict(True, "no row remapping or page retirement pending" if reported
                   else "row remapping and page retirement not reported by these GPUs")


def judge_xid_hardware(log: KernelLog, _: SectionOutput) -> Verdict:
    if log.source is None:
        return Verdict(True, f"kernel log not readable here ({log.why}): Xids not checked")
    seen: dict[tuple[str, int], int] = {}
    for ev in log.events:
        if X.xid_class(ev.xid) == X.HARDWARE:
            seen[(ev.pci, ev.xid)] = seen.get((ev.pci, ev.xid), 0) + 1
    if not seen:
        return Verdict(True, f"no hardware Xid since boot ({log.source})")
    items = [f"Xid {x} on GPU {pci}" + (f" x{n}" if n > 1 else "") + f": {X.xid_meaning(x)}"
             for (pci, x), n in seen.items()]
    return Verdict(False, _listing(items, 5))


def judge_xid_other(log: KernelLog, _: SectionOutput) -> Verdict:
    if log.source is None:
        return Verdict(False, f"kernel log not readable here: {log.why}")
    seen: dict[tuple[str, int], int] = {}
    for ev in log.events:
        if X.xid_class(ev.xid) != X.HARDWARE:
            seen[(ev.pci, ev.xid)] = seen.get((ev.pci, ev.xid), 0) + 1
    items = [f"Xid {x} on GPU {pci}" + (f" x{n}" if n > 1 else "") + f": {X.xid_meaning(x)}"
             for (pci, x), n in seen.items()]
    items += [f"an Xid line clusterkit cannot read: {line!r}" for line in log.unreadable[:3]]
    return Verdict(not items, _listing(items, 5) if items else "no other Xid since boot")


def judge_pcie(q: SmiQuery, _: SectionOutput) -> Verdict:
    bad: list[str] = []
    unjudged = 0
    for g in q.gpus:
        if not g.has_link_info:
            continue
        if g.width_current is None or g.width_max is None:
            bad.append(f"GPU {g.bus_id}: link width unreadable ({g.link_raw or 'not printed'})")
            continue
        if g.width_current < g.width_max:
            bad.append(f"GPU {g.bus_id}: PCIe x{g.width_current} of x{g.width_max}")
        # an idle GPU lowers its link generation to save power: judge it only at P0, not idle
        busy = g.perf_state == "P0" and (g.idle or "").lower() == "not active"
        if g.gen_current is not None and g.gen_max is not None and g.gen_current < g.gen_max:
            if busy:
                bad.append(f"GPU {g.bus_id}: PCIe Gen{g.gen_current} of Gen{g.gen_max} at P0")
            else:
                unjudged += 1
    if bad:
        return Verdict(False, _listing(bad))
    if not any(g.has_link_info for g in q.gpus):
        return Verdict(True, "PCIe link not reported by nvidia-smi")
    note = f" ({unjudged} GPU(s) at a lower generation while power-saving: not judged)" if unjudged else ""
    return Verdict(True, "every GPU at its maximum link width" + note)


def judge_clocks(q: SmiQuery, _: SectionOutput) -> Verdict:
    bad = [f"GPU {g.bus_id}: {', '.join(r for r, v in g.slowdowns if v.lower() == 'active')}"
           for g in q.gpus if any(v.lower() == "active" for _r, v in g.slowdowns)]
    if bad:
        return Verdict(False, "clocks slowed by the hardware: " + _listing(bad))
    if not any(g.has_clock_reasons for g in q.gpus):
        return Verdict(True, "clock event reasons not reported by nvidia-smi")
    return Verdict(True, "no hardware slowdown")


def judge_nvlink(st: NvlinkStatus, _: SectionOutput) -> Verdict:
    if not st.gpus or all(g.active == 0 for g in st.gpus):
        return Verdict(True, "no active NVLink (a GPU without NVLink, or none in use)")
    most = max(len(g.links) for g in st.gpus)
    bad: list[str] = []
    for g in st.gpus:
        down = [str(link.link) for link in g.links if link.state != "up"]
        if down:
            bad.append(f"GPU {g.index}: link {','.join(down)} " + ("inactive" if all(
                link.state == "inactive" for link in g.links if link.state != "up") else "down or unreadable"))
        elif len(g.links) < most:
            bad.append(f"GPU {g.index}: {len(g.links)} links, others have {most}")
    return Verdict(not bad, _listing(bad) if bad else f"{len(st.gpus)} GPUs, every NVLink up")


def judge_nvlink_errors(reads: NvlinkErrorReads, _: SectionOutput) -> Verdict:
    """A link error counter (replay, recovery, CRC) that rose between the two reads fails."""
    if reads.unreported:
        return Verdict(True, f"NVLink error counters not reported by nvidia-smi ({reads.unreported})")
    if not reads.first:
        return Verdict(True, "no NVLink error counters (a GPU without NVLink)")
    interval = f" in {reads.interval_s} s" if reads.interval_s else ""
    rising = [f"GPU {gpu} link {link}: {name} +{after - before}{interval}"
              for (gpu, link, name), after in sorted(reads.second.items())
              if after is not None and (before := reads.first.get((gpu, link, name))) is not None and after > before]
    if rising:
        return Verdict(False, "NVLink errors rising: " + _listing(rising))
    links = {(gpu, link) for gpu, link, _name in reads.first}
    return Verdict(True, f"NVLink error counters steady on {len(links)} link(s){interval}")


def counters_judge(e: Expectations) -> Judge:
    """A judge of two counter reads: a counter of a configured HCA's port that rose fails."""

    def judge(reads: CounterReads, _: SectionOutput) -> Verdict:
        specs = [(h, port) for h, _sep, port in (s.partition(":") for s in e.hcas)]
        wanted = {(k[0], k[1]) for k in reads.second
                  if not specs or any(k[0] == h and (not port or str(k[1]) == port) for h, port in specs)}
        interval = f" in {reads.interval_s} s" if reads.interval_s else ""
        rising: list[str] = []
        for key, after in sorted(reads.second.items()):
            before = reads.first.get(key)
            if (key[0], key[1]) in wanted and after is not None and before is not None and after > before:
                rising.append(f"{key[0]} port {key[1]}: {key[2]} +{after - before}{interval}")
        if rising:
            return Verdict(False, "error counters rising: " + _listing(rising))
        # a port whose counters read "N/A (no PMA)" (iWARP and some RoCE drivers) was not watched
        readable = {(k[0], k[1]) for k, after in reads.second.items()
                    if after is not None and reads.first.get(k) is not None} & wanted
        blind = sorted(f"{h} port {p}" for h, p in wanted - readable)
        if not readable:
            return Verdict(True, "no error counters readable for the configured HCAs"
                           + (f" ({_listing(blind)}: not numbers)" if blind else ""))
        note = f"; not readable on {_listing(blind)}" if blind else ""
        return Verdict(True, f"error counters steady on {len(readable)} port(s){interval}{note}")

    return judge


def health_parts(e: Expectations, *, ib: bool) -> tuple[list[Section], list[Check]]:
    """The deeper health checks for a stage: the GPU ones always, the counters with ``ib``."""
    t = min(20.0, max(2.0, e.command_timeout_s / 3))
    sections = [H.smi_query_section(t), H.nvlink_section(t), H.nvlink_errors_section(t), H.xid_section(min(10.0, t))]
    q = parse_smi_query
    checks = [
        Check("gpu.row_remap", "smi_q", q, judge_row_remap, requires="gpu.present",
              describe="no GPU memory row remapping pending or failed, no retired pages pending (nvidia-smi -q)"),
        Check("gpu.pcie", "smi_q", q, judge_pcie, requires="gpu.present",
              describe="PCIe link width at the GPU's maximum; generation too when not power-saving (nvidia-smi -q)"),
        Check("gpu.clocks", "smi_q", q, judge_clocks, requires="gpu.present",
              describe="no HW Slowdown, HW Thermal or HW Power Brake slowdown active (nvidia-smi -q)"),
        Check("gpu.nvlink", "nvlink", parse_nvlink, judge_nvlink, requires="gpu.present",
              describe="every NVLink link up where NVLink is in use (nvidia-smi nvlink -s)"),
        Check("gpu.nvlink_errors", "nvlink_e", parse_nvlink_errors, judge_nvlink_errors, requires="gpu.present",
              describe=f"NVLink replay, recovery and CRC error counters steady over {H.COUNTER_INTERVAL_S} s "
                       "(nvidia-smi nvlink -e)"),
        Check("gpu.xid", "xid", parse_xid_log, judge_xid_hardware,
              describe="no hardware Xid in the kernel log since boot"),
        Check("gpu.xid_other", "xid", parse_xid_log, judge_xid_other, Severity.WARN,
              describe="no other Xid (a program's fault, or one not in clusterkit's table) since boot"),
    ]
    if ib:
        sections.append(H.ib_counters_section())
        checks.append(Check("ib.counters", "ib_counters", parse_ib_counters, counters_judge(e), requires="ib.hcas",
                            describe=f"symbol_error, link_downed, port_rcv_errors steady over "
                                     f"{H.COUNTER_INTERVAL_S} s on the configured HCAs"))
    return sections, checks
