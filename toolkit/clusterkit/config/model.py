"""The base of every site config section's model (:mod:`clusterkit.config.schema`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Model(BaseModel):
    # strict: `gpus_per_node: true` is not 1; allow_inf_nan: `.inf` GB of memory is not a size
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
