"""Real captures (tests/data/captures/, see its README): each file is a header of ``# key: value``
lines (source, version, command, notes), a ``# ---`` line, then what the tool printed, byte for
byte; ``<name>.expected.json`` beside it holds the values read off it by hand.  Stand-ins that
print a capture are scripts of one ``cat`` of the body: nothing of the capture runs."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import REPO

ROOT = REPO / "tests" / "data" / "captures"
SEPARATOR = "# ---\n"


@dataclass(frozen=True)
class Capture:
    path: Path
    header: dict[str, str]
    body: str
    expected: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.path.parent.name}/{self.path.stem}"


def load(path: Path) -> Capture:
    raw = path.read_bytes().decode("utf-8")
    head, sep, body = raw.partition(SEPARATOR)
    assert sep, f"{path}: no '# ---' line ending the header"
    header: dict[str, str] = {}
    for line in head.splitlines():
        assert line.startswith("# ") and ": " in line, f"{path}: header line {line!r}"
        key, _, value = line[2:].partition(": ")
        header[key] = (header[key] + " " + value) if key in header else value
    for key in ("source", "version", "command"):
        assert header.get(key), f"{path}: header has no {key}"
    expected = json.loads(path.with_suffix(".expected.json").read_text())
    return Capture(path, header, body, expected)


def captures(kind: str) -> list[Capture]:
    """Every capture of one kind (a folder of tests/data/captures)."""
    return [load(p) for p in sorted((ROOT / kind).glob("*.txt"))]


def stand_in(bin_dir: Path, tool: str, body: str, *, by_args: dict[str, str] | None = None,
             other: str | None = None) -> Path:
    """A ``tool`` on ``bin_dir`` that prints ``body`` (a capture); ``by_args`` maps an exact
    argument string to another text, ``other`` names a program that answers any other call."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    files = bin_dir / f".{tool}.d"
    files.mkdir(exist_ok=True)
    (files / "default").write_text(body)
    lines = ["#!/bin/bash", "# stand-in: prints a captured output (tests/data/captures)", 'case "$*" in']
    for i, (args, text) in enumerate((by_args or {}).items()):
        (files / str(i)).write_text(text)
        lines.append(f"  {json.dumps(args)}) exec cat {json.dumps(str(files / str(i)))} ;;")
    if other is not None:
        lines.append(f'  "") exec cat {json.dumps(str(files / "default"))} ;;')
        lines.append(f'  *) exec {json.dumps(other)} "$@" ;;')
    else:
        lines.append(f'  *) exec cat {json.dumps(str(files / "default"))} ;;')
    lines.append("esac")
    path = bin_dir / tool
    path.write_text("\n".join(lines) + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def env_with(bin_dir: Path) -> dict[str, str]:
    """This process's environment with ``bin_dir`` first on PATH and no test sysroot."""
    env = {k: v for k, v in os.environ.items() if k != "CLUSTERKIT_SYSROOT"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env
