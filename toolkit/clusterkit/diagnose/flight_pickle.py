"""Unpickling a flight-recorder dump within bounds (docs/architecture.md §5, diagnose/).

A dump is a pickle others wrote.  Refusing every global (:class:`PlainData`) keeps code out, but
plain data can still be hostile: a few hundred bytes of memo references ("billion laughs": a list
of ten references to a list of ten references to ...) unpickle in no time into a structure that
expands exponentially when walked or printed, and 64 MiB of one-byte ``EMPTY_LIST`` opcodes build
tens of millions of objects.  So, before anything reads the result:

* the opcodes are counted first (``pickletools.genops``, stopped at :data:`MAX_OPS` or after
  :data:`MAX_SECONDS`), and a number longer than :data:`MAX_INT_BYTES` is refused;
* the unpickled value is walked with a budget of :data:`MAX_NODES` visits, each visit of a
  shared container counted again, so a structure whose expansion exceeds the budget is refused
  before any caller expands it.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import time
from typing import Any

MAX_OPS = 2_000_000       # a dump of 2,000 entries per group with stacks is some 10^5 opcodes
MAX_NODES = 2_000_000     # values reached, shared ones counted at every reference
MAX_INT_BYTES = 16        # collective sequence numbers and times fit 8 bytes
MAX_SECONDS = 5.0
_LONGS = {"LONG", "LONG1", "LONG4"}


class DumpTooLarge(ValueError):
    """The dump exceeds a bound (opcodes, expansion, number size or time)."""


class PlainData(pickle.Unpickler):
    """Unpickles plain data only: any class or function a pickle names is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}: a flight-recorder dump holds plain data")


def _scan(data: bytes) -> None:
    deadline = time.monotonic() + MAX_SECONDS
    for n, (op, arg, _) in enumerate(pickletools.genops(io.BytesIO(data))):
        if n >= MAX_OPS:
            raise DumpTooLarge(f"more than {MAX_OPS} pickle opcodes")
        if op.name in _LONGS and isinstance(arg, int) and arg.bit_length() > 8 * MAX_INT_BYTES:
            raise DumpTooLarge(f"a number of more than {MAX_INT_BYTES} bytes")
        if n % 4096 == 0 and time.monotonic() > deadline:
            raise DumpTooLarge(f"not read within {MAX_SECONDS:g} s")


def _walk(value: Any) -> None:
    budget, todo = MAX_NODES, [value]
    while todo:
        item = todo.pop()
        budget -= 1
        if budget < 0:
            raise DumpTooLarge(f"more than {MAX_NODES} values once shared references are followed")
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            todo.extend(item)
        elif isinstance(item, int) and item.bit_length() > 8 * MAX_INT_BYTES:
            raise DumpTooLarge(f"a number of more than {MAX_INT_BYTES} bytes")


def load(data: bytes) -> Any:
    """The plain data pickled in ``data``; :class:`DumpTooLarge` past a bound, another exception
    for a malformed pickle."""
    _scan(data)
    value = PlainData(io.BytesIO(data)).load()
    _walk(value)
    return value
