"""The check engine: judging a node's script output.

A :class:`CheckSet` holds the *sections* of the remote script (one shell command each, guarded
by ``timeout``; :mod:`clusterkit.nodes.script` builds the script and splits its output) and the
*checks* that read them (a parser, a judgement, a severity); the catalogue
(:mod:`clusterkit.preflight.catalogue`) chooses them for a site and stage.  This module knows
nothing about SSH: it judges text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from clusterkit.nodes.script import (
    SKIPPED_RC,
    Section,
    SectionOutput,
    build_script,
    new_token,
    seconds_text,
    split_sections,
)
from clusterkit.tooltext import ParseFailure
from clusterkit.vocab import STAGE_NAMES

# Only the stage decides which checks apply.
SINGLE, MULTI, LARGE = STAGE_NAMES

class Severity(str, Enum):
    ERROR = "error"  # a failed check fails the node
    WARN = "warn"  # a failed check is reported, the node stays usable


class Status(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"  # not judged because a check it depends on failed


# ---------------------------------------------------------------------------------------------
# sections, checks, results
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    passed: bool
    message: str


Judge = Callable[[Any, SectionOutput], Verdict]


@dataclass(frozen=True)
class Check:
    """A declarative check: read ``section``, parse it, judge the result, with a severity."""

    name: str  # e.g. "gpu.count"
    section: str
    parse: Callable[[str], Any]
    judge: Judge
    severity: Severity = Severity.ERROR
    target: str = ""  # what it is about, when a check repeats (a storage path)
    requires: str | None = None  # check name (same target) that must pass, or this one is skipped
    describe: str = ""  # what it verifies, for --json and the docs

    @property
    def key(self) -> str:
        return f"{self.name}:{self.target}" if self.target else self.name


@dataclass(frozen=True)
class CheckResult:
    check: str
    status: Status
    severity: Severity
    message: str
    target: str = ""
    raw: str | None = None  # the text that could not be parsed, kept for the report
    cut: bool = False  # never judged: the remote command ended before its section ran

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"check": self.check, "status": self.status.value, "severity": self.severity.value,
                               "message": self.message}
        if self.target:
            out["target"] = self.target
        if self.raw is not None:
            out["raw"] = self.raw
        if self.cut:
            out["cut"] = True
        return out


@dataclass(frozen=True)
class CheckSet:
    """The sections to run and the checks to judge, for one site and stage."""

    sections: tuple[Section, ...]
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()  # stage/site level remarks: what was skipped and why
    token: str = field(default_factory=new_token)

    def script(self) -> str:
        """The remote script of these sections."""
        return build_script(self.sections, self.token)



# ---------------------------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------------------------


def _result(check: Check, passed: bool, message: str, raw: str | None = None) -> CheckResult:
    status = Status.OK if passed else Status.FAIL if check.severity is Severity.ERROR else Status.WARN
    return CheckResult(check.name, status, check.severity, message, check.target, raw)


def _section_problem(check: Check, out: SectionOutput | None, check_set: CheckSet, cut_reason: str) -> str | None:
    """Why a section's output cannot be judged at all (missing, cut off, timed out), or None."""
    section = next(s for s in check_set.sections if s.name == check.section)
    if out is None:
        return f"not checked: {cut_reason}"
    if out.rc is None:
        return f"cut off while running ({cut_reason})"
    if out.timed_out:
        return f"no answer within {seconds_text(section.timeout_s)} s"
    if out.rc == SKIPPED_RC:
        return out.text.strip() or "skipped"
    return None


def evaluate(check_set: CheckSet, stdout: str, cut_reason: str = "the remote command ended early") -> list[CheckResult]:
    """Judge every check of ``check_set`` against one node's script output.

    ``cut_reason`` says why sections may be missing (e.g. "remote command timed out after 30 s").
    Each section is parsed once; a ParseFailure fails every check reading it, raw text kept.
    """
    sections = split_sections(stdout, check_set.token)
    parsed: dict[str, Any] = {}
    results: list[CheckResult] = []
    by_key: dict[str, CheckResult] = {}
    for check in check_set.checks:
        if check.requires is not None:
            dep = by_key.get(f"{check.requires}:{check.target}" if check.target else check.requires)
            if dep is not None and dep.status is not Status.OK:
                res = CheckResult(check.name, Status.SKIP, check.severity, f"not judged: {dep.check} failed",
                                  check.target)
                results.append(res)
                by_key[check.key] = res
                continue
        out = sections.get(check.section)
        problem = _section_problem(check, out, check_set, cut_reason)
        if problem is not None or out is None:
            problem = f"{check.target}: {problem}" if check.target else (problem or "not checked")
            if out is not None and out.rc == SKIPPED_RC:  # its section was not run: another one hung
                res = CheckResult(check.name, Status.SKIP, check.severity, problem, check.target)
            else:
                res = replace(_result(check, False, problem), cut=out is None or out.rc is None)
        else:
            if check.section not in parsed:
                parsed[check.section] = check.parse(out.text)
            value = parsed[check.section]
            if isinstance(value, ParseFailure):
                msg = value.reason if value.tool_error else f"could not parse {value.what}: {value.reason}"
                res = _result(check, False, msg, value.raw)
            else:
                verdict = check.judge(value, out)
                res = _result(check, verdict.passed, verdict.message)
        results.append(res)
        by_key[check.key] = res
    return results


def describe_checks(check_set: CheckSet) -> list[dict[str, str]]:
    """The set's checks as data (for --json and documentation)."""
    return [{"check": c.name, "target": c.target, "severity": c.severity.value, "what": c.describe}
            for c in check_set.checks]
