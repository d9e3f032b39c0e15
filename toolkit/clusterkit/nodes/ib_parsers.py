"""Total, pure parsers of what the InfiniBand tools print: the sysfs InfiniBand tree and
``ibstat`` (re-exported by :mod:`clusterkit.nodes.device_parsers`, with the GPU ones).

None runs a command and none raises on bad input; the tests feed them captured text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypedDict

from clusterkit.tooltext import ParseFailure, clip, failure, parse_float, parse_int


@dataclass(frozen=True)
class IbPort:
    """One HCA port.  ``state`` is upper case (ACTIVE, DOWN, INIT, ARMED), as sysfs spells it."""

    hca: str
    port: int
    state: str | None = None
    phys_state: str | None = None  # LinkUp, Disabled, Polling, ...
    rate_gbps: float | None = None
    link_layer: str | None = None  # InfiniBand or Ethernet

    @property
    def label(self) -> str:
        return f"{self.hca} port {self.port}"


@dataclass(frozen=True)
class IbInventory:
    """All HCA ports found on a node (possibly none) and where the facts came from."""

    ports: tuple[IbPort, ...]
    source: str  # "sysfs", "ibstat" or "none"
    raw: str = ""
    # ibstat stops at the first device it cannot read (``ibpanic: ... stat of IB device
    # 'mlx5_8' failed: ...``): the devices such lines name, and the lines themselves
    missing: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    # each HCA's device model where the text says it (ibstat's ``CA type: MT4129``, sysfs
    # ``hca_type``): (hca, model) pairs
    models: tuple[tuple[str, str], ...] = ()

    @property
    def hcas(self) -> list[str]:
        return sorted({p.hca for p in self.ports})

    def model_of(self, hca: str) -> str | None:
        return dict(self.models).get(hca)

    def ports_of(self, hca: str) -> list[IbPort]:
        return sorted((p for p in self.ports if p.hca == hca), key=lambda p: p.port)


_SYSFS_LINE_RE = re.compile(
    r"(?:.*?)/sys/class/infiniband/(?P<hca>[^/]+)/ports/(?P<port>\d+)/(?P<attr>state|phys_state|rate|link_layer):(?P<value>.*)"
)
# the device-level model file beside the ports: /sys/class/infiniband/mlx5_0/hca_type:MT4129
_SYSFS_TYPE_RE = re.compile(r"(?:.*?)/sys/class/infiniband/(?P<hca>[^/]+)/hca_type:(?P<value>.*)")
_MODEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:Gb/sec|Gb/s)?")
# ibstat spells states in mixed case; sysfs in upper case.  One vocabulary for the checks.
_IBSTAT_STATE = {"active": "ACTIVE", "down": "DOWN", "initializing": "INIT", "init": "INIT", "armed": "ARMED"}


class _PortFields(TypedDict, total=False):
    """What a parser has read about one port so far: the IbPort fields after ``hca`` and ``port``."""

    state: str | None
    phys_state: str | None
    rate_gbps: float | None
    link_layer: str | None


def _rate(value: str) -> float | None:
    m = _RATE_RE.match(value)
    return parse_float(m.group(1), limit=1e6) if m else None


def _sysfs_field(fields: _PortFields, attr: str, value: str) -> None:
    """sysfs attribute text -> the IbPort field: ``state`` ``4: ACTIVE`` -> state "ACTIVE"."""
    value = value.strip()
    if attr in ("state", "phys_state"):
        # "4: ACTIVE", "5: LinkUp" - the number is the IBTA code, the word is what people read
        word = value.split(":", 1)[1].strip() if ":" in value else value
        if attr == "state":
            fields["state"] = word.upper() or None
        else:
            fields["phys_state"] = word or None
    elif attr == "rate":
        fields["rate_gbps"] = _rate(value)
    else:
        fields["link_layer"] = value or None


def parse_ib_sysfs(text: str) -> IbInventory | ParseFailure:
    """Parse ``grep -H '' /sys/class/infiniband/*/ports/*/{state,phys_state,rate,link_layer}``
    (and ``/sys/class/infiniband/*/hca_type``, the device model).

    Lines look like ``/sys/class/infiniband/mlx5_0/ports/1/state:4: ACTIVE`` (any path prefix,
    e.g. a test sysroot, is allowed).  Empty text means no HCA at all (an empty inventory).
    """
    ports: dict[tuple[str, int], _PortFields] = {}
    models: dict[str, str] = {}
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        t = _SYSFS_TYPE_RE.fullmatch(line.strip())
        if t:
            if _MODEL_RE.fullmatch(t.group("value").strip()):
                models[t.group("hca")] = t.group("value").strip()
            continue
        m = _SYSFS_LINE_RE.fullmatch(line.strip())
        if not m:
            return failure("infiniband sysfs", f"unexpected line {line.strip()[:80]!r}", text)
        port_no = parse_int(m.group("port"), max_digits=4)
        if port_no is None:
            return failure("infiniband sysfs", f"port number {m.group('port')[:20]!r} is not one", text)
        key = (m.group("hca"), port_no)
        _sysfs_field(ports.setdefault(key, _PortFields()), m.group("attr"), m.group("value"))
    found = tuple(IbPort(hca, port, **fields) for (hca, port), fields in sorted(ports.items()))
    named = tuple(sorted((h, m) for h, m in models.items() if any(p.hca == h for p in found)))
    return IbInventory(found, "sysfs" if found else "none", clip(text or ""), models=named)


def _ibstat_port_attr(port: _PortFields, key: str, value: str) -> None:
    if key == "State":
        port["state"] = _IBSTAT_STATE.get(value.lower(), value.upper())
    elif key == "Physical state":
        port["phys_state"] = value
    elif key == "Rate":
        port["rate_gbps"] = _rate(value)
    elif key == "Link layer":
        port["link_layer"] = value


# libibumad's messages: ``ibpanic: [pid] func: text`` (ibstat exits after it), ``ibwarn: ...``
_IB_DIAG_RE = re.compile(r"(ibpanic|ibwarn):\s*\[\d+\]\s*(.*)")
_IB_DIAG_DEVICE_RE = re.compile(r"IB device '([^'\s]{1,64})'")


def parse_ibstat(text: str) -> IbInventory | ParseFailure:
    """Parse ``ibstat`` output: ``CA 'mlx5_0'`` blocks with indented ``Port N:`` sub-blocks.

    An ``ibpanic:`` line (ibstat gave up on one device and exited) keeps what parsed before it;
    the device it names is listed in ``missing`` and the line in ``errors``.
    """
    what = "ibstat"
    ports: list[IbPort] = []
    missing: list[str] = []
    errors: list[str] = []
    models: dict[str, str] = {}
    hca: str | None = None
    current: tuple[str, int, _PortFields] | None = None  # (hca, port, what its lines said)

    def flush() -> None:
        if current is not None:
            ports.append(IbPort(current[0], current[1], **current[2]))

    for line in (text or "").splitlines():
        if not line.strip():
            continue
        ca = re.fullmatch(r"CA '([^']+)'\s*", line)
        port = re.fullmatch(r"\s+Port (\d+):\s*", line)
        kv = re.fullmatch(r"\s+([A-Za-z][A-Za-z ]*?):\s*(.*)", line)
        diag = _IB_DIAG_RE.fullmatch(line.strip())
        if diag:
            errors.append(f"{diag.group(1)}: " + "".join(c for c in diag.group(2)[:200] if c.isprintable()))
            device = _IB_DIAG_DEVICE_RE.search(diag.group(2)) if diag.group(1) == "ibpanic" else None
            if device and device.group(1) not in missing:
                missing.append(device.group(1))
        elif ca:
            flush()
            hca, current = ca.group(1), None
        elif port and hca is not None:
            flush()
            port_no = parse_int(port.group(1), max_digits=4)
            if port_no is None:
                return failure("ibstat", f"port number {port.group(1)[:20]!r} is not one", text)
            current = (hca, port_no, _PortFields())
        elif kv and hca is not None:
            if current is not None:
                _ibstat_port_attr(current[2], kv.group(1), kv.group(2).strip())
            elif kv.group(1) == "CA type" and _MODEL_RE.fullmatch(kv.group(2).strip()):
                models[hca] = kv.group(2).strip()
        else:
            return failure(what, f"unexpected line {line.strip()[:80]!r}", text)
    flush()
    if not ports and not errors and (text or "").strip():
        return failure(what, "no 'CA ... Port N:' blocks", text)
    named = tuple(sorted((h, m) for h, m in models.items() if any(p.hca == h for p in ports)))
    return IbInventory(tuple(ports), "ibstat" if ports or errors else "none", clip(text or ""),
                       tuple(missing), tuple(errors), named)


def parse_ib(text: str) -> IbInventory | ParseFailure:
    """Parse either form the preflight script may return (sysfs lines, else ibstat output)."""
    if re.search(r"^(CA '|ibpanic:|ibwarn:)", text or "", re.MULTILINE):
        return parse_ibstat(text)
    return parse_ib_sysfs(text)


__all__ = ["IbInventory", "IbPort", "parse_ib", "parse_ib_sysfs", "parse_ibstat"]
