"""The site's ``code:`` keys: the snapshot of the code a job runs (docs/jobs.md, "The code as it
was"; taken by :mod:`clusterkit.codesnap`).

The defaults, and why: a job that waits in the queue should run the code as it was when it was
submitted, at every stage and on a local site too (a local job runs for hours while its files
are edited), so snapshots are on.  The limits catch a working tree that holds data, not code
(a checkpoint or a data set that is neither tracked nor ignored): 20,000 files and 512 MiB are
far above a training repository's code and far below what a copy per job should cost.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CodeKeys(BaseModel):
    """Whether ``submit`` snapshots the code (``--no-snapshot`` per job) and the snapshot's limits."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    snapshot: bool = Field(True, description="run each job in a snapshot of the code taken at submit time "
                           "(stages.<stage>.snapshot for one stage; --no-snapshot for one job)")
    max_files: int = Field(20_000, ge=1, le=10_000_000, description="most files a snapshot may hold "
                           "(--set code_max_files=N for one job)")
    max_mb: int = Field(512, ge=1, le=1_000_000, description="most MiB a snapshot may hold "
                        "(--set code_max_mb=N for one job)")
