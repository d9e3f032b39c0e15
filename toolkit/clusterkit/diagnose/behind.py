"""Only cascade symptoms: which rank is behind (the collective its watchdog timed out at)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from clusterkit.diagnose.evidence import ev, key, make, rank_words
from clusterkit.diagnose.reader import Finding


def behind(findings: Iterable[Finding]) -> dict[str, Any] | None:
    """The verdict naming the rank behind, from one attempt's findings (None: no collective timed out)."""
    timeouts = sorted((f for f in findings if f.cascade == "nccl-timeout"), key=key)
    if not timeouts:
        return None
    groups: dict[str | None, list[Finding]] = {}
    for f in timeouts:
        if f.seq is not None:
            groups.setdefault(f.pg, []).append(f)
    # a rank is behind only against ranks of its own process group; a group whose ranks
    # stopped at different collectives says who is behind, the earliest such group first
    spread = [g for g in groups.values() if len({f.seq for f in g}) > 1]
    pick = spread[0] if spread else next(iter(groups.values()), None)
    if pick:
        low = min(f.seq for f in pick if f.seq is not None)
        lead = min((f for f in pick if f.seq == low), key=lambda f: (f.rank if f.rank is not None else 1 << 30))
        seqs = {f.seq for f in pick}
        pg = f"process group {lead.pg}: " if lead.pg is not None and len(groups) > 1 else ""
        summary = (f"{pg}{rank_words(lead)} is behind: its watchdog timed out at collective {low}"
                   + (f", the others at {max(s for s in seqs if s is not None)}" if len(seqs) > 1 else
                      " (every rank timed out at the same collective: the one behind may have printed nothing)"))
    else:
        lead = timeouts[0]
        summary = "collectives timed out on every rank that printed; none says which rank is behind"
    return make("nccl-timeout", lead, [ev(lead)], summary=summary)
