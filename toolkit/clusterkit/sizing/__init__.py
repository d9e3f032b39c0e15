"""The memory model and recommendation behind ``clusterkit plan`` (docs/architecture.md §5).

Pure: no I/O, no clock, no environment.  :mod:`.model` holds the memory figures (DeepSpeed's
estimators to the byte, DDP, ZeRO-1, Megatron, activations); :mod:`.inputs` the request and the
site's hardware as plain numbers; :mod:`.candidates` the ways to train and their evaluation at a
layout; :mod:`.recommend` the entry point, :func:`size_job`.  The names below are the API.
"""

from __future__ import annotations

from clusterkit.sizing.inputs import MAX_PARAMS, OFFLOADS, Hardware, SizingRequest, human_count, parse_size
from clusterkit.sizing.model import BUFFER_FACTOR, DEFAULT_HEADROOM, DEFAULT_VOCAB, GIB, Shape, make_shape
from clusterkit.sizing.recommend import Sizing, size_job
from clusterkit.vocab import LAUNCHERS

__all__ = [
    "BUFFER_FACTOR",
    "DEFAULT_HEADROOM",
    "DEFAULT_VOCAB",
    "GIB",
    "LAUNCHERS",
    "MAX_PARAMS",
    "OFFLOADS",
    "Hardware",
    "Shape",
    "Sizing",
    "SizingRequest",
    "human_count",
    "make_shape",
    "parse_size",
    "size_job",
]
