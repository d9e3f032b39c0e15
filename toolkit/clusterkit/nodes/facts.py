"""Node facts (GPUs and driver, HCAs and their ports, network interfaces, mounts), gathered
with the node script, the fact sections and the parsers: one script, one connection per node.
The admin commands (``sites init --probe``, ``sites drift``) read them; nothing here judges."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clusterkit.nodes import device_parsers as D
from clusterkit.nodes import parsers as P
from clusterkit.nodes import script
from clusterkit.nodes import sections as S

# /sys/class/net/<if>/type is the ARPHRD number (the net section prints it)
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


def probe_sections() -> tuple[script.Section, ...]:
    """The sections to run: only facts (the judging happens in drift/init)."""
    return (S.gpu_section(20.0), S.ib_section(), S.mounts_section(), S.net_section())


def _read(sections: dict[str, script.SectionOutput], name: str, parse: Any, problems: list[str]) -> Any:
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
    sections = script.split_sections(stdout, token)
    problems: list[str] = []
    gpus = _read(sections, "gpu", D.parse_gpu_query, problems)
    ib = _read(sections, "ib", D.parse_ib, problems)
    if ib is not None and ib.missing:
        problems.append(f"ib: ibstat could not read {', '.join(ib.missing)} ({ib.errors[-1]})")
    mounts = _read(sections, "mounts", P.parse_mounts, problems)
    nets = _read(sections, "net", parse_interfaces, problems)
    return NodeFacts(host, "", gpus, ib, mounts, nets, tuple(problems))


def probe(hosts: Sequence[str], runner: Any, *, timeout_s: float = 60.0) -> dict[str, NodeFacts]:
    """Run the facts script on every host (all of them, not a sample) through ``runner``."""
    token = script.new_token()
    results = runner.run_many(list(hosts), script.build_script(probe_sections(), token), timeout_s=timeout_s)
    out: dict[str, NodeFacts] = {}
    for host, res in results.items():
        if not res.reachable or res.error is not None:
            out[host] = NodeFacts(host, error=f"{res.error.value if res.error else 'error'}: {res.reason}")
        else:
            out[host] = node_facts(host, res.stdout, token)
    return out

