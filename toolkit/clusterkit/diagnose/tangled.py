"""One line that several processes wrote at once.

Ranks that share one output stream (torchrun's workers on one node, srun's tasks into one file)
write Python's exception line in pieces: ``KeyError``, ``: ``, ``'missing_key'``, each a write of
its own on an unbuffered stderr.  When every rank raises the same exception at the same moment,
the pieces interleave into ``KeyErrorKeyError: : 'missing_key''missing_key'``.  Such a line is a
*shuffle* of k copies of one line; :func:`untangle` finds that line again.

Only a line made of k identical copies is untangled (different lines cannot be told apart), and
only where each character occurs a multiple of k times, so an ordinary line costs one count.
The search is bounded: a line longer than :data:`LONGEST` characters is kept as it is (no rank's
exception line is), a line it cannot settle within :data:`BUDGET` steps too, and each step costs
the line's alphabet, not its length (a step used to count the rest of the line: 10,000 steps on
a 66,000-character line a rank printed kept ``doctor`` busy for 50 s).
"""

from __future__ import annotations

from collections import Counter

#: the most copies looked for (ranks that raised within the same few microseconds)
MOST = 4
#: the shortest copy worth untangling: shorter ones are separators ("===="), not messages
SHORTEST = 8
#: search steps per line before giving up
BUDGET = 5_000
#: the longest line looked at: k copies of an exception line of at most MOST x 1,024 characters
LONGEST = MOST * 1_024


def untangle(line: str) -> tuple[str, int]:
    """``(the line one process wrote, how many wrote it)``; ``(line, 1)`` where it is no shuffle
    of identical copies."""
    body = line.rstrip("\r\n")
    if len(body) > LONGEST:
        return line, 1
    counts = Counter(body)
    for k in range(2, MOST + 1):
        if len(body) % k or len(body) // k < SHORTEST or any(c % k for c in counts.values()):
            continue
        copy = _root(body, k)
        if copy is not None:
            inner, more = untangle(copy)  # four copies read as two copies of two copies
            return inner, k * more
    return line, 1


def _root(text: str, k: int) -> str | None:
    """The string s such that ``text`` interleaves k copies of s, found depth first.

    A state is (characters consumed, where each copy stands); the copy furthest on defines s, a
    copy behind it must take the character s has at its position.  Writes come in pieces, so the
    copy that took the last character is tried first; copies at one position are alike, so only one
    of them is tried; a state whose remaining characters cannot make up what the copies still need
    is dropped.
    """
    n = len(text) // k
    built: list[str] = []
    suffix = _suffix_counts(text)
    prefix: list[dict[str, int]] = [{}]   # prefix[i]: the characters of built[:i]
    # each frame: (index into text, positions, choices left to try at this index)
    stack: list[tuple[int, tuple[int, ...], list[tuple[int, tuple[int, ...]]]]] = []
    idx, pos, last = 0, (0,) * k, 0
    steps = 0
    while True:
        steps += 1
        if steps > BUDGET:
            return None
        if idx == len(text):
            return "".join(built)
        choices = _choices(text, idx, pos, last, built, n) if _feasible(suffix[idx], pos, prefix, k) else []
        while not choices:
            if not stack:
                return None
            idx, pos, choices = stack.pop()
            del built[max(pos):]  # the copy furthest on is s itself: its length is the largest position
            del prefix[max(pos) + 1:]
        last, nxt = choices.pop(0)
        stack.append((idx, pos, choices))
        if max(nxt) > len(built):
            built.append(text[idx])
            grown = dict(prefix[-1])
            grown[text[idx]] = grown.get(text[idx], 0) + 1
            prefix.append(grown)
        idx, pos = idx + 1, nxt


def _suffix_counts(text: str) -> list[dict[str, int]]:
    """``out[i]``: how often each character occurs in ``text[i:]`` (``out[len(text)]`` is empty)."""
    out: list[dict[str, int]] = [{}]
    for ch in reversed(text):
        counts = dict(out[-1])
        counts[ch] = counts.get(ch, 0) + 1
        out.append(counts)
    out.reverse()
    return out


def _choices(text: str, idx: int, pos: tuple[int, ...], last: int, built: list[str],
             n: int) -> list[tuple[int, tuple[int, ...]]]:
    """(copy, positions after it takes ``text[idx]``) for each copy that can take it, the copy
    that took the character before first."""
    ch, lead = text[idx], len(built)
    out: list[tuple[int, tuple[int, ...]]] = []
    seen: set[int] = set()
    for i in [last] + [j for j in range(len(pos)) if j != last]:
        p = pos[i]
        if p in seen:
            continue  # a copy at the same position: the same choice
        seen.add(p)
        if (p < lead and built[p] == ch) or (p == lead and lead < n):
            out.append((i, (*pos[:i], p + 1, *pos[i + 1:])))
    return out


def _feasible(left: dict[str, int], pos: tuple[int, ...], prefix: list[dict[str, int]], k: int) -> bool:
    """Whether the characters left (``left``) can be what the copies behind still owe (each copy
    at ``p`` owes ``built[p:]``, counted from ``prefix``) plus k copies of the rest of s."""
    lead = prefix[-1]
    for ch in set(left) | set(lead):
        owed = sum(lead.get(ch, 0) - prefix[p].get(ch, 0) for p in pos)
        rest = left.get(ch, 0) - owed
        if rest < 0 or rest % k:
            return False
    return True
