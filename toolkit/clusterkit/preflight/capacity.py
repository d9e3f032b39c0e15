"""The checkpoint capacity check: the checkpoints a job keeps (their size as ``clusterkit plan``
models it, :mod:`clusterkit.job.checkpoint`) against the free space and inodes of the checkpoint
directory, on the node that runs the check (docs/jobs.md, "How often to checkpoint").

It is in the catalogue only when a model size is given (``preflight --model-params``, a job's
``--set model_params=``).  A directory not made yet is measured at its nearest existing parent.
The node prints that directory and ``stat -f``'s figures for it: blocks free to an unprivileged
user, the block size they are counted in, free and total inodes (0 total: no inode limit).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clusterkit.errors import InputError
from clusterkit.job.checkpoint import judge
from clusterkit.nodes.script import Section, SectionOutput
from clusterkit.preflight.engine import Check, Severity, Verdict
from clusterkit.tooltext import ParseFailure, clip, failure, first_line

if TYPE_CHECKING:
    from clusterkit.config.schema import Site

SECTION = "ckpt_space"
_ROW = re.compile(r"([0-9]{1,20}) ([0-9]{1,12}) ([0-9]{1,20}) ([0-9]{1,20})")
_DIR = re.compile(r"dir (/[^\x00-\x1f]{0,4095})")


@dataclass(frozen=True)
class CheckpointNeed:
    """What the job keeps: ``keep`` checkpoints of ``params`` parameters saved by ``gpus`` ranks
    (0: the GPUs of the nodes checked), in ``path`` (absolute, on the nodes).  ``warn_only``: too
    little room is a warning, not a failed node (the in-job preflight: the nodes are not at fault)."""

    path: str
    params: int
    keep: int
    gpus: int = 0
    warn_only: bool = False


@dataclass(frozen=True)
class Space:
    measured: str          # the directory stat -f was asked about (the path or its nearest parent)
    free_bytes: int
    free_inodes: int       # 2**62 where the file system has no inode limit


def need(site: Site, params: int, keep: int = 2, path: str | None = None, *, warn_only: bool = False) -> CheckpointNeed:
    """The need checked: ``keep`` checkpoints of ``params`` parameters in ``path`` (default: the
    site's checkpoint directory, as a job from here would get it), every argument checked."""
    from clusterkit.job.plan import checkpoint_base

    if isinstance(params, bool) or not isinstance(params, int) or params < 1:
        raise InputError("must be a parameter count of at least 1", field="model_params", value=repr(params))
    if isinstance(keep, bool) or not isinstance(keep, int) or not 1 <= keep <= 1000:
        raise InputError("keep 1 to 1000 checkpoints", field="keep_checkpoints", value=repr(keep))
    if path is None:
        path = checkpoint_base(site, os.path.join(os.getcwd(), "runs", "run"))
    elif not isinstance(path, str) or not path or any(ord(c) < 32 for c in path):
        raise InputError("must be a directory path", field="checkpoint_dir", value=repr(path)[:80])
    return CheckpointNeed(os.path.abspath(path), params, keep, warn_only=warn_only)


def section(need: CheckpointNeed, timeout_s: float) -> Section:
    """The nearest existing directory of ``need.path`` and its file system's free figures."""
    q = shlex.quote(need.path.rstrip("/") or "/")
    walk = (f'd={q}; while [ -n "$d" ] && [ ! -d "$CK_ROOT$d" ]; do d=${{d%/*}}; done; [ -n "$d" ] || d=/; '
            'printf "dir %s\\n" "$d" && stat -f -c "%a %S %d %c" -- "$CK_ROOT$d"')
    return Section(SECTION, walk, timeout_s)


def parse_space(text: str) -> Space | ParseFailure:
    """The section's output: ``dir PATH`` then ``AVAIL BLOCKSIZE FFREE FILES`` (``stat -f -c``)."""
    what = "stat -f"
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    if len(lines) != 2 or not (d := _DIR.fullmatch(lines[0])):
        said = first_line(text or "")
        if said.startswith("stat:"):
            return ParseFailure(what, said[:300], clip(text), tool_error=True)
        return failure(what, f"expected 'dir PATH' and one line of four numbers, got {said[:80]!r}", text or "")
    row = _ROW.fullmatch(lines[1])
    if not row:
        return failure(what, f"expected four numbers, got {lines[1][:80]!r}", text)
    avail, block, ffree, files = (int(g) for g in row.groups())
    return Space(d.group(1), avail * block, ffree if files > 0 else 2**62)


def checks(need: CheckpointNeed) -> list[Check]:
    """Too little space or too few inodes fail the node; what fits but leaves under 10 % free warns."""

    def judged(s: Space) -> tuple[str, str]:
        cap = judge(need.path, need.params, need.gpus, need.keep, s.free_bytes, s.free_inodes)
        where = "" if s.measured.rstrip("/") == need.path.rstrip("/") else f" (not made yet: measured at {s.measured})"
        return cap.verdict, cap.message + where

    def fits(s: Space, _: SectionOutput) -> Verdict:
        verdict, message = judged(s)
        return Verdict(verdict != "too-small", message)

    def margin(s: Space, _: SectionOutput) -> Verdict:
        verdict, message = judged(s)
        return Verdict(verdict != "tight", message if verdict == "tight" else "leaves at least 10 % free")

    size = f"{need.keep} x {need.params:.3g} parameters"
    return [
        Check("checkpoint.capacity", SECTION, parse_space, fits,
              Severity.WARN if need.warn_only else Severity.ERROR, target=need.path,
              describe=f"{size} fit the free space and inodes of the checkpoint directory"),
        Check("checkpoint.margin", SECTION, parse_space, margin, Severity.WARN, target=need.path,
              requires="checkpoint.capacity", describe="the kept checkpoints leave at least 10 % of it free"),
    ]
