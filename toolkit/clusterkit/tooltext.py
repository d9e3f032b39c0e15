"""What every parser of tool output shares (preflight's node tools, Slurm's tables): the
:class:`ParseFailure` a total parser returns instead of raising, and the bound on the raw text
it keeps (docs/architecture.md §1)."""

from __future__ import annotations

from dataclasses import dataclass

RAW_LIMIT = 4000  # keep raw text bounded: a node or a command may print megabytes of garbage


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
