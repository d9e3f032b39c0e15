"""What ``clusterkit doctor`` hands back (:class:`Diagnosis`): made by :mod:`.doctor`, grouped
over a job array's tasks by :mod:`.arrays`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Diagnosis:
    """The doctor report, and what to tell the user beside it (paths that were not there)."""

    report: dict[str, Any]
    notes: list[str] = field(default_factory=list)
