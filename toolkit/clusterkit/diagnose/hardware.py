"""Hardware evidence on a node outranks an out-of-memory on the same node.

A GPU that reported a hardware fault (an Xid, an uncorrectable ECC error, a lost device) in this
run, or in an earlier run of the same job, explains an out-of-memory on that node better than the
program does: memory a bad GPU retired, a driver that lost the device while the host filled up.
The verdict becomes ``gpu-hardware`` (retry without the node), with the OOM kept as evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from clusterkit.diagnose import catalogue
from clusterkit.diagnose.evidence import ev, key, make

if TYPE_CHECKING:
    from clusterkit.diagnose.verdict import Attempt

_OOM = ("gpu-oom", "host-oom")


def outranks_oom(atts: Mapping[int, Attempt], restart: int, v: dict[str, Any]) -> dict[str, Any] | None:
    """The hardware verdict that replaces ``v`` (an OOM on a known node of run ``restart``), if any."""
    node = v.get("node")
    if v.get("category") not in _OOM or not node:
        return None
    hw = sorted((f for r, att in atts.items() if r <= restart for f in att.findings
                 if f.category == "gpu-hardware" and not f.cascade and f.node == node),
                key=lambda f: (f.restart, key(f)))
    if not hw:
        return None
    lead = hw[0]
    when = f" in restart {lead.restart}" if lead.restart != restart else ""
    summary = (f"{catalogue.SUMMARIES['gpu-hardware']} on {node}{when}, before the out-of-memory there: "
               f"{lead.text.strip()[:160]}")
    evidence = [ev(lead)] + [f"then {v['category']}: {e}" for e in v.get("evidence", [])]
    return make("gpu-hardware", lead, evidence, node=node, rank=lead.rank if lead.restart == restart else None,
                summary=summary)
