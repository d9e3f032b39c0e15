"""What every parser of tool output shares (preflight's node tools, Slurm's tables): the
:class:`ParseFailure` a total parser returns instead of raising, the bound on the raw text
it keeps (docs/architecture.md §1), :func:`printable`, the one way such text reaches a terminal,
and :func:`parse_int` / :func:`parse_float` / :func:`decode`, the one lenient way numbers and
bytes from outside become values (never an exception: None for what is not one)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

_ASCII_INT = re.compile(r"[0-9]+")
_ASCII_SIGNED = re.compile(r"[+-]?[0-9]+")
# a plain decimal as tools print it: no "inf", "nan", "1_000", hex, or digits other than 0-9
_ASCII_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")
NUMBER_MAX_CHARS = 40  # no tool prints a longer number; longer text is not one


def decode(raw: bytes | bytearray) -> str:
    """Bytes from outside as text: invalid UTF-8 becomes U+FFFD, never an exception."""
    return bytes(raw).decode("utf-8", errors="replace")


def parse_int(text: str, *, max_digits: int = 18, signed: bool = False) -> int | None:
    """``text`` (stripped) as an integer of ASCII digits, at most ``max_digits`` of them; None
    otherwise.  ``str.isdigit`` accepts ``²`` and ``int`` refuses it; ``int`` of 5,000 digits
    raises: neither reaches a caller of this."""
    text = text.strip()
    if not (_ASCII_SIGNED if signed else _ASCII_INT).fullmatch(text):
        return None
    if len(text.lstrip("+-")) > max_digits:
        return None
    return int(text)


def parse_iso(text: str | None) -> float | None:
    """An ISO 8601 time as a record writes it (``2026-12-06T03:24:46.123456Z``) in epoch seconds;
    None for no time or anything else."""
    if not text or len(text) > 40:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def parse_float(text: str, *, limit: float = 1e18) -> float | None:
    """``text`` (stripped) as a finite decimal number no larger than ``limit`` in magnitude;
    None for ``1e400``, ``inf``, ``nan``, non-ASCII digits and anything longer than a number."""
    text = text.strip()
    if len(text) > NUMBER_MAX_CHARS or not _ASCII_FLOAT.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) and abs(value) <= limit else None

JSON_MAX_DEPTH = 32  # no document clusterkit reads from outside nests deeper


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > NUMBER_MAX_CHARS:
        raise ValueError(f"integer of {len(text)} digits")
    return int(text)


def _json_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _depth(value: Any) -> int:
    """How deeply ``value`` nests (iteratively: a deep document cannot exhaust the stack here)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, d = todo.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, d)
            if d <= JSON_MAX_DEPTH:
                todo.extend((v, d + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"key {twice[:40]!r} given twice")
    return out


def load_json(text: str, *, max_depth: int = JSON_MAX_DEPTH, allow_nan: bool = False,
              unique_keys: bool = False) -> Any:
    """Strict JSON from outside (node output, run-directory files, records): ``ValueError`` for
    ``NaN``/``Infinity``, a number that overflows, an integer longer than a number, nesting
    deeper than ``max_depth``, or a document so deep the parser runs out of stack; never another
    exception.  ``allow_nan``: non-finite numbers are read as floats, for a reader that checks
    each figure itself.  ``unique_keys``: a key given twice in one object is a ``ValueError`` (which
    of two values a reader takes is not for the writer to choose)."""
    try:
        value = json.loads(text, parse_float=float if allow_nan else _json_float, parse_int=_json_int,
                           parse_constant=float if allow_nan else _json_constant,
                           object_pairs_hook=_unique if unique_keys else None)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if _depth(value) > max_depth:
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    return value


# CSI and OSC sequences, then any other escape: a node could print "ALL OK" over its own failure
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?")
# C0 and C1 controls, and the Unicode line and paragraph separators
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROLS_BUT_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """Text from outside (nodes, Slurm, logs, records) made safe for one terminal line: escape
    sequences dropped, every other control character a space.  Every human rendering of such
    text goes through this or :func:`printable_lines`; ``--json`` escapes instead."""
    return _CONTROLS.sub(" ", _ESCAPES.sub("", text))


def printable_lines(text: str) -> str:
    """:func:`printable` for text of several lines: newlines and tabs are kept."""
    return _CONTROLS_BUT_LINES.sub(" ", _ESCAPES.sub("", text))


RAW_LIMIT = 4000  # keep raw text bounded: a node or a command may print megabytes of garbage


def shorten(text: str, limit: int, tail: str = "...") -> str:
    """``text`` in at most ``limit`` characters: whole, or cut at the last space within the limit
    (mid-word only where a word is longer than half of it) and ended with ``tail``."""
    if len(text) <= limit:
        return text
    room = max(0, limit - len(tail))
    cut = text[:room]
    space = cut.rfind(" ")
    if space >= room // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + tail


def clip(text: str) -> str:
    """``text``, cut to :data:`RAW_LIMIT` characters with a note of how much was left out."""
    return text if len(text) <= RAW_LIMIT else text[:RAW_LIMIT] + f"... [{len(text) - RAW_LIMIT} more chars]"


@dataclass(frozen=True)
class ParseFailure:
    """Text a parser could not read: what was expected, why it failed, and the raw text."""

    what: str
    reason: str
    raw: str
    tool_error: bool = False  # the tool printed its own error message (not garbage)

    def __str__(self) -> str:
        return f"{self.what}: {self.reason}"


def failure(what: str, reason: str, raw: str) -> ParseFailure:
    return ParseFailure(what, reason, clip(raw))


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped (for one-line messages)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""
