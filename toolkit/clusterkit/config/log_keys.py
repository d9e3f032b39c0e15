"""The site's ``logs:`` keys: where a large job's per-process files go (docs/jobs.md, "Logs at
thousands of ranks").

Why: ``--debug`` gives every process its own NCCL file, and torchrun's ``--tee`` a folder per rank.
At 2,048 nodes of 8 GPUs that is 16,384 files created at once in one directory of the shared file
system, a metadata storm that slows every job on it.  Up to ``debug_max_nodes`` nodes they go to the
run's ``logs/``; above it ``--debug``'s NCCL files (unless ``--debug-nodes NODESET`` names the nodes
to log INFO, into the run's logs), the flight recorder's dumps and torchrun's per-rank files stay on
each node under ``node_local_dir`` (torchrun's console copy, every line prefixed with the rank, still
reaches the job's logs), and after a failed attempt the supervisor copies back the dump of the rank
its verdict names and that node's NCCL files.  64 nodes (512 ranks of 8 GPUs) is a directory a
parallel file system's metadata server creates in well under a second.
"""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

_PATH = re.compile(r"/[A-Za-z0-9._+/-]*")


class LogKeys(BaseModel):
    """Per-process log files at scale."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    debug_max_nodes: int = Field(64, ge=1, le=1_000_000, description="above this many nodes, --debug's NCCL "
                                 "files (without --debug-nodes), flight-recorder dumps and torchrun's per-rank log "
                                 "files stay node-local (under node_local_dir); a failure's named ones come back")
    node_local_dir: str = Field("/tmp", min_length=1, max_length=200, description="a directory on each node's own "
                                "disk for per-rank files above debug_max_nodes (torchrun's --log-dir, "
                                "flight-recorder dumps)")

    @field_validator("node_local_dir")
    @classmethod
    def _dir(cls, v: str) -> str:
        if not _PATH.fullmatch(v) or os.path.normpath(v) != v:
            raise ValueError(f"{v!r}: an absolute, normalized path of letters, digits and . _ + - / "
                             "(e.g. /tmp or /local/scratch)")
        return v
