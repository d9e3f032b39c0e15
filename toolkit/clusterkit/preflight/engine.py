"""The check engine: the one remote script every node runs, and the judging of its output.

A :class:`CheckSet` holds the *sections* of the remote script (one shell command each, guarded
by ``timeout``) and the *checks* that read them (a parser, a judgement, a severity); the
catalogue (:mod:`clusterkit.preflight.catalogue`) chooses them for a site and stage.  Each node
runs the whole script once - one connection, one command - and its output is split back into
sections by markers carrying a random token, so nothing a node prints can forge a section
boundary.

Paths are read through ``${CLUSTERKIT_SYSROOT:-}`` (empty on real nodes) so a test node can
serve its own sysfs, mount table and storage tree.  This module knows nothing about SSH: it
makes text and judges text.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from clusterkit.tooltext import ParseFailure
from clusterkit.vocab import STAGE_NAMES

# Only the stage decides which checks apply.
SINGLE, MULTI, LARGE = STAGE_NAMES

# timeout(1) exits 124 when it stopped the command, 137 (128 + KILL) when -k had to kill it.
TIMEOUT_RCS = {"124", "137"}
SKIPPED_RC = "skip"


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
class Section:
    """One command of the remote script.  ``command`` is shell text with every value quoted."""

    name: str  # [a-z0-9_]+ : also a shell variable suffix
    command: str
    timeout_s: float
    unless_timed_out: str | None = None  # skip this section if that one timed out (hung mount)


@dataclass(frozen=True)
class SectionOutput:
    """What one section printed (stdout and stderr together) and how it ended."""

    name: str
    text: str
    rc: str | None  # exit status as printed, "skip", or None when the END marker never came

    @property
    def timed_out(self) -> bool:
        return self.rc in TIMEOUT_RCS


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
    token: str = field(default_factory=lambda: secrets.token_hex(8))



# ---------------------------------------------------------------------------------------------
# the remote script
# ---------------------------------------------------------------------------------------------

_PRELUDE = r"""# clusterkit preflight: one script per node, sections delimited by markers.
CK_ROOT=${CLUSTERKIT_SYSROOT:-}
export CK_ROOT
ck_m=%(marker)s
ck_section() {
    # $1 name  $2 timeout (s)  $3 section that must not have timed out ('' = none)  $4 shell text
    printf '\n%%s BEGIN %%s\n' "$ck_m" "$1"
    if [ -n "$3" ] && eval "[ \"\${ck_rc_$3:-}\" = 124 ] || [ \"\${ck_rc_$3:-}\" = 137 ]"; then
        echo "skipped: section $3 timed out"
        ck_rc=skip
    else
        timeout -k 2 "$2" sh -c "$4" </dev/null 2>&1
        ck_rc=$?
    fi
    eval "ck_rc_$1=\$ck_rc"
    printf '\n%%s END %%s %%s\n' "$ck_m" "$1" "$ck_rc"
}
"""


def _seconds(t: float) -> str:
    return f"{max(t, 0.1):g}"


def build_script(check_set: CheckSet) -> str:
    """The POSIX sh script every node runs: the prelude, then one ``ck_section`` per section."""
    marker = f"@@ck-{check_set.token}@@"
    lines = [_PRELUDE % {"marker": shlex.quote(marker)}]
    for s in check_set.sections:
        if not re.fullmatch(r"[a-z0-9_]+", s.name):
            raise ValueError(f"section name {s.name!r} must be [a-z0-9_]+")  # a bug, not user input
        after = shlex.quote(s.unless_timed_out or "")
        lines.append(f"ck_section {s.name} {_seconds(s.timeout_s)} {after} {shlex.quote(s.command)}")
    return "\n".join(lines) + "\n"


def split_sections(stdout: str, token: str) -> dict[str, SectionOutput]:
    """Split a node's output back into sections; a section without END was cut off (rc None)."""
    marker = re.escape(f"@@ck-{token}@@")
    begin_re = re.compile(rf"{marker} BEGIN ([a-z0-9_]+)")
    end_re = re.compile(rf"{marker} END ([a-z0-9_]+) (\S+)")
    out: dict[str, SectionOutput] = {}
    current: str | None = None
    body: list[str] = []
    for line in stdout.splitlines():
        b, e = begin_re.fullmatch(line), end_re.fullmatch(line)
        if b:
            if current is not None:  # BEGIN without END: the previous section never finished
                out[current] = SectionOutput(current, "\n".join(body).strip("\n"), None)
            current, body = b.group(1), []
        elif e and current is not None and e.group(1) == current:
            # the prelude prints a newline before END, so drop the one blank line it adds
            text = "\n".join(body[:-1] if body and body[-1] == "" else body)
            out[current] = SectionOutput(current, text, e.group(2))
            current, body = None, []
        elif current is not None:
            body.append(line)
    if current is not None:
        out[current] = SectionOutput(current, "\n".join(body).strip("\n"), None)
    return out


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
        return f"no answer within {_seconds(section.timeout_s)} s"
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
