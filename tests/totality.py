"""The totality check every parser of tool output passes: captured text, cut, spliced and
shuffled, never makes it raise; what it cannot read is a ParseFailure that keeps the raw text."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from clusterkit.tooltext import RAW_LIMIT, ParseFailure


def assert_total(parser: Callable[[str], Any], captures: Sequence[str], rounds: int = 300) -> None:
    rng = random.Random(4)
    for _ in range(rounds):
        text = rng.choice(captures)
        cut = rng.randrange(len(text) + 1)
        mangled = rng.choice([text[:cut], text[cut:], text[:cut] + rng.choice(captures), text.replace(",", "|"),
                              "".join(rng.sample(text, len(text))), "\x00\ufffd" * rng.randrange(5)])
        result = parser(mangled)
        if isinstance(result, ParseFailure):
            assert result.raw == mangled[:RAW_LIMIT] or result.raw.startswith(mangled[:RAW_LIMIT])
