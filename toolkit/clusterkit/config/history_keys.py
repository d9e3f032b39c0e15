"""The site's ``node_history:`` keys: when a node's record of failures keeps it out of new jobs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from clusterkit import hostlist


class NodeHistoryKeys(BaseModel):
    """Nodes that keep failing: a node with at least ``exclude_after`` hardware verdicts within
    the last ``window_days`` days (the user's node history of this site) is kept out of new jobs
    (``#SBATCH --exclude``), unless it is in ``allow`` or the job sets ``--set node_history=false``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    exclude_after: int = Field(3, ge=0, le=1000, description="hardware verdicts within window_days that keep a "
                               "node out of new jobs; 0: never keep one out (clusterkit nodes still lists them)")
    window_days: float = Field(30.0, gt=0, le=3650, description="how far back the verdicts count, in days")
    allow: str = Field("", description="a host list let into jobs whatever its history "
                       "(e.g. after an admin repaired them)")

    shared_dir: str | None = Field(None, description="a directory the cluster's admins own (root's, sticky where "
                                   "others may write): each user's failures are written there too, as "
                                   "<site>@<user>.json, and other users' count, at most one failure per user and node")

    @field_validator("shared_dir")
    @classmethod
    def _shared(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError(f"{v[:80]!r}: give an absolute path")
        return v

    @field_validator("window_days", mode="before")
    @classmethod
    def _days(cls, v: object) -> object:
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("allow")
    @classmethod
    def _allow(cls, v: str) -> str:
        if v.strip():
            hostlist.expand(v.strip())   # HostlistError is a ValueError: reported at the key's line
        return v.strip()
