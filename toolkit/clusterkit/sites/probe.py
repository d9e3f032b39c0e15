"""Node facts (GPUs and driver, HCAs and their ports, network interfaces, mounts), gathered
with preflight's script format, transports and parsers: one script, one connection per node."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clusterkit.preflight import catalogue, engine
from clusterkit.preflight import device_parsers as D
from clusterkit.preflight import parsers as P

# /sys/class/net/<if>/type is the ARPHRD number: 1 Ethernet, 32 InfiniBand (IPoIB), 772 loopback.
_NET = ('for d in "$CK_ROOT"/sys/class/net/*; do [ -r "$d/type" ] && '
        'printf "%s %s %s\\n" "${d##*/}" "$(cat "$d/type")" "$(cat "$d/operstate" 2>/dev/null)"; done; true')
IF_TYPES = {"1": "ethernet", "32": "infiniband", "772": "loopback"}


@dataclass(frozen=True)
class Interface:
    name: str
    kind: str  # ethernet | infiniband | loopback | other
    state: str  # up | down | unknown ...


@dataclass(frozen=True)
class NodeFacts:
    """What one node told us; a field is None when its section could not be read (see ``problems``)."""

    host: str
    error: str = ""  # the node could not be reached or the script did not run
    gpus: D.GpuQuery | None = None
    ib: D.IbInventory | None = None
    mounts: tuple[P.Mount, ...] | None = None
    interfaces: tuple[Interface, ...] | None = None
    problems: tuple[str, ...] = ()

    @property
    def reachable(self) -> bool:
        return not self.error

    @property
    def drivers(self) -> list[str]:
        return sorted(self.gpus.driver_versions) if self.gpus else []

    @property
    def gpu_names(self) -> list[str]:
        return sorted({g.name for g in self.gpus.gpus}) if self.gpus else []


def parse_interfaces(text: str) -> tuple[Interface, ...] | P.ParseFailure:
    """Lines ``name type operstate`` (the probe's /sys/class/net listing)."""
    out: list[Interface] = []
    for line in (text or "").splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 2 or not parts[1].isdigit():
            return P.ParseFailure("network interfaces", f"unexpected line {line.strip()[:80]!r}", text[:4000])
        out.append(Interface(parts[0], IF_TYPES.get(parts[1], "other"), parts[2] if len(parts) > 2 else "unknown"))
    return tuple(out)


def probe_sections() -> engine.CheckSet:
    """The sections to run: no checks, only facts (the judging happens in drift/init)."""
    sections = (catalogue.gpu_section(20.0), catalogue.ib_section(), catalogue.mounts_section(),
                engine.Section("net", _NET, 5.0))
    return engine.CheckSet(sections, ())


def _read(sections: dict[str, engine.SectionOutput], name: str, parse: Any, problems: list[str]) -> Any:
    out = sections.get(name)
    if out is None or out.rc is None:
        problems.append(f"{name}: no output (the script was cut off)")
        return None
    value = parse(out.text)
    if isinstance(value, P.ParseFailure):
        problems.append(f"{name}: {value}")
        return None
    return value


def node_facts(host: str, stdout: str, token: str) -> NodeFacts:
    """One node's script output -> its facts (pure)."""
    sections = engine.split_sections(stdout, token)
    problems: list[str] = []
    gpus = _read(sections, "gpu", D.parse_gpu_query, problems)
    ib = _read(sections, "ib", D.parse_ib, problems)
    mounts = _read(sections, "mounts", P.parse_mounts, problems)
    nets = _read(sections, "net", parse_interfaces, problems)
    return NodeFacts(host, "", gpus, ib, mounts, nets, tuple(problems))


def probe(hosts: Sequence[str], runner: Any, *, timeout_s: float = 60.0) -> dict[str, NodeFacts]:
    """Run the facts script on every host (all of them, not a sample) through ``runner``."""
    check_set = probe_sections()
    results = runner.run_many(list(hosts), engine.build_script(check_set), timeout_s=timeout_s)
    out: dict[str, NodeFacts] = {}
    for host, res in results.items():
        if not res.reachable or res.error is not None:
            out[host] = NodeFacts(host, error=f"{res.error.value if res.error else 'error'}: {res.reason}")
        else:
            out[host] = node_facts(host, res.stdout, check_set.token)
    return out


def make_runner(site: Any, transport: str) -> Any:
    """The preflight runner for ``transport`` (ssh or srun), configured from ``site``."""
    from clusterkit.preflight.run import make_runner as preflight_runner

    return preflight_runner(site, transport)
