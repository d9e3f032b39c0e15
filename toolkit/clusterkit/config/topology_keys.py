"""``network.topology``: the site's Slurm topology plugin and how jobs ask to be placed on it
(:mod:`clusterkit.config.schema`; rendered by :mod:`clusterkit.scheduler.slurm.directives` as
``#SBATCH --switches`` / ``--segment``, the hosts ordered by switch or block in the job)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from clusterkit.config.model import _Model
from clusterkit.vocab import check_slurm_time


class NetworkTopology(_Model):
    """Slurm's topology plugin on this site (``TopologyPlugin`` in ``scontrol show config``) and
    the placement every multi-node job asks for.  ``tree``: at most ``max_switches`` leaf switches,
    waiting up to ``max_wait`` for them (``--switches=N@T``); ``block``: segments of ``segment``
    nodes, each inside one block (``--segment``, Slurm 24.05+)."""

    plugin: Literal["tree", "block"] = Field(description="Slurm's topology plugin: topology/tree or topology/block")
    max_switches: int | None = Field(None, ge=1, le=100000, description="tree: the most leaf switches a job may "
                                     "span (#SBATCH --switches=N)")
    max_wait: str | int | None = Field(None, description="tree: how long the job may wait for max_switches, a Slurm "
                                       "time (\"00:10:00\") or minutes (--switches=N@T; Slurm caps it at its "
                                       "max_switch_wait, 300 s unless the site sets it)")
    segment: int | None = Field(None, ge=1, le=100000, description="block: nodes per segment, each segment inside one "
                                "block (#SBATCH --segment=S, Slurm 24.05+); a job's node count is a multiple of it")

    @field_validator("max_wait")
    @classmethod
    def _max_wait(cls, v: str | int | None) -> str | None:
        if v is None:
            return None
        if isinstance(v, bool) or (isinstance(v, int) and not 1 <= v <= 525600):
            raise ValueError(f"max_wait {v!r}: minutes from 1 to 525600, or a Slurm time like \"00:10:00\"")
        return check_slurm_time(str(v))

    @model_validator(mode="after")
    def _plugin_keys(self) -> NetworkTopology:
        if self.plugin == "tree" and self.segment is not None:
            raise ValueError("segment is topology/block's (--segment); topology/tree places by switches: "
                             "use max_switches (and max_wait)")
        if self.plugin == "block" and (self.max_switches is not None or self.max_wait is not None):
            raise ValueError("max_switches and max_wait are topology/tree's (--switches); topology/block places "
                             "by segment: use segment")
        if self.max_wait is not None and self.max_switches is None:
            raise ValueError("max_wait is the wait for max_switches (--switches=N@T): give max_switches too")
        return self

    def sbatch(self) -> list[tuple[str, str]]:
        """The ``#SBATCH`` options this placement asks for: ``switches`` (``N`` or ``N@T``), ``segment``."""
        if self.max_switches is not None:
            wait = f"@{self.max_wait}" if self.max_wait is not None else ""
            return [("switches", f"{self.max_switches}{wait}")]
        if self.segment is not None:
            return [("segment", str(self.segment))]
        return []
