"""What the README and docs/*.md show, read as data: their fenced code blocks, the
``clusterkit ...`` command lines in them, their relative links and the anchors of their headings
(GitHub's rule). ``tests/docs`` checks each against the real command line and the real files."""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO

FENCE = re.compile(r"^(`{3,}|~{3,})(.*)$")
OPERATORS = {"&&", "||", "|", ";", "&"}


def doc_files() -> list[Path]:
    """README.md and every docs/*.md, in a fixed order."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@dataclass(frozen=True)
class Block:
    path: Path
    line: int          # the line of the opening fence, 1-based
    info: str          # the fence's info string: "bash", "console", "" ...
    lines: tuple[str, ...]


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of one markdown file."""
    found: list[Block] = []
    fence: tuple[str, str, int] | None = None
    body: list[str] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence, body = (m.group(1), m.group(2).strip(), n), []
        elif m and m.group(1).startswith(fence[0]) and not m.group(2).strip():
            found.append(Block(path, fence[2], fence[1], tuple(body)))
            fence = None
        else:
            body.append(line)
    assert fence is None, f"{rel(path)}:{fence[2]}: a code block is never closed"
    return found


def prose(path: Path) -> Iterator[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered."""
    inside: str | None = None
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = FENCE.match(line)
        if inside is None and m:
            inside = m.group(1)
        elif inside is not None and m and m.group(1).startswith(inside) and not m.group(2).strip():
            inside = None
        elif inside is None:
            yield n, line


@dataclass(frozen=True)
class Shown:
    """One ``clusterkit`` command as a doc shows it."""

    path: Path
    line: int
    text: str                   # the logical line, continuations joined
    argv: tuple[str, ...]       # the words after ``clusterkit``
    env: tuple[tuple[str, str], ...]   # ``export NAME=VALUE`` lines above it in its block

    @property
    def id(self) -> str:
        return f"{rel(self.path)}:{self.line}"


def logical_lines(lines: tuple[str, ...], first: int) -> Iterator[tuple[int, str]]:
    """Lines with their ``\\`` continuations joined, each with the number of its first line."""
    buf, start = "", first
    for n, line in enumerate(lines, first):
        if not buf:
            start = n
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        yield start, buf + line
        buf = ""
    if buf:
        yield start, buf


def split_commands(text: str) -> list[list[str]]:
    """A shell line as its simple commands: split at ``&&``, ``|``, ``;``; redirections dropped
    (with their target, and the descriptor number before them)."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    words = list(lex)
    commands: list[list[str]] = [[]]
    i = 0
    while i < len(words):
        w = words[i]
        if w in OPERATORS:
            commands.append([])
        elif w and set(w) <= set("<>&"):   # a redirection: >, >>, <, >&, 2>&1's '>&'
            if commands[-1] and commands[-1][-1].isdigit():
                commands[-1].pop()
            i += 1                          # its target
        else:
            commands[-1].append(w)
        i += 1
    return [c for c in commands if c]


def shown_commands() -> list[Shown]:
    """Every ``clusterkit`` command line in the docs: in ``bash`` blocks, and the ``$ clusterkit``
    lines of transcripts (``console`` or plain blocks)."""
    found: list[Shown] = []
    for path in doc_files():
        for block in blocks(path):
            env: list[tuple[str, str]] = []
            transcript = block.info != "bash"
            for n, text in logical_lines(block.lines, block.line + 1):
                if transcript:
                    if not text.startswith("$ "):
                        continue
                    text = text[2:]
                elif block.info != "bash":
                    continue
                if "clusterkit" not in text and "export " not in text:
                    continue
                for words in split_commands(text):
                    if words[0] == "export" and len(words) == 2 and "=" in words[1]:
                        name, value = words[1].split("=", 1)
                        env.append((name, value))
                    if words[0] == "clusterkit":
                        found.append(Shown(path, n, text, tuple(words[1:]), tuple(env)))
    return found


LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"(`+).*?\1")


def links(path: Path) -> Iterator[tuple[int, str]]:
    """Relative markdown links ``[text](target)`` outside code blocks and code spans."""
    for n, line in prose(path):
        for m in LINK.finditer(CODE_SPAN.sub("", line)):
            target = m.group(2)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):   # http:, https:, mailto: ...
                yield n, target


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: lower case, punctuation dropped (but ``-`` and
    ``_``), spaces to ``-``; markdown's backticks and emphasis dropped with the punctuation."""
    text = heading.strip().lower()
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a markdown file (a repeated one gets ``-1``, ``-2``...)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in prose(path):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        k = seen.get(base, 0)
        out.add(base if k == 0 else f"{base}-{k}")
        seen[base] = k + 1
    return out
