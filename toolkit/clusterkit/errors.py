"""The clusterkit error family and the exit codes every command shares.

Exit codes (documented in ``clusterkit --help``):

* 0 ``OK``          - success
* 1 ``FAILURE``     - runtime failure: a job failed to submit or failed, preflight found bad nodes
* 2 ``USAGE``       - usage or configuration error: bad option, bad site config, impossible plan
* 3 ``UNREACHABLE`` - preflight could not reach some nodes, or the Slurm controller did not answer

Domain errors carry everything needed for a one-line message; the CLI turns them into that
line and the exit code in one place.  Programming bugs are *not* ClusterkitErrors and are
never dressed up as user errors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    UNREACHABLE = 3


@dataclass(frozen=True)
class FieldProblem:
    """One problem with one input of a request, named by its field path.

    ``field`` is the path in the Python API's terms (``settings.zero_stage``, ``nodes``,
    ``job_name``, ``out``); ``value`` is the offending value as shown after the name (already
    quoted where the CLI quotes it), or None; ``message`` follows ``sep``.  The Python API shows
    ``settings.zero_stage=5: ...``; the CLI names the same field by its option
    (``--set zero_stage=5: ...``), from this one object.
    """

    field: str
    message: str
    value: str | None = None
    sep: str = ": "
    fix: tuple[str, str] | None = None   # (field, value) that would fix it, worded like the field

    def worded(self, name: Callable[[str, str | None], str] | None = None) -> str:
        """The problem as one line; ``name(field, value)`` words the field (default: ``field=value``),
        and the input that fixes it, if known (``; use stage=multi-node`` / ``--stage multi-node``)."""
        word = name or (lambda field, value: field if value is None else f"{field}={value}")
        fix = "" if self.fix is None else f"; use {word(*self.fix)}"
        return f"{word(self.field, self.value)}{self.sep}{self.message}{fix}"


_E = TypeVar("_E", bound="ClusterkitError")


class ClusterkitError(Exception):
    """Base of every error a user can cause or must act on.

    An error about one input of a request carries it as :attr:`problems` (field path, value,
    message); :attr:`field` is the first one's path.  ``str(err)`` words the fields as the
    Python API names them; the CLI words them as options (:meth:`lines_named`).
    """

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str = "", *, field: str | None = None, value: str | None = None,
                 sep: str = ": ", fix: tuple[str, str] | None = None) -> None:
        self.problems: tuple[FieldProblem, ...] = (
            (FieldProblem(field, message, value, sep, fix),) if field is not None else ())
        super().__init__(self.problems[0].worded() if self.problems else message)

    @classmethod
    def about(cls: type[_E], problems: Sequence[FieldProblem]) -> _E:
        """One error for several problems with a request's fields (reported all at once)."""
        err = cls("; ".join(p.worded() for p in problems))
        err.problems = tuple(problems)
        return err

    @property
    def field(self) -> str | None:
        """The field path of the (first) input at fault, e.g. ``settings.zero_stage``; None if none."""
        return self.problems[0].field if self.problems else None

    def lines(self) -> list[str]:
        """The message as one or more self-contained lines (one per problem)."""
        return [p.worded() for p in self.problems] or [str(self)]

    def lines_named(self, name: Callable[[str, str | None], str]) -> list[str]:
        """:meth:`lines` with each field worded by ``name(field, value)`` (the CLI: its options)."""
        return [p.worded(name) for p in self.problems] or self.lines()


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a site config: where it is and what is wrong."""

    file: str
    line: int | None
    loc: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.loc}: {self.message}" if self.loc else f"{where}: {self.message}"


class ConfigError(ClusterkitError):
    """A site config (or several problems in one) is invalid.  Reported all at once."""

    exit_code = ExitCode.USAGE

    def __init__(self, issues: Sequence[ConfigIssue]):
        self.issues = list(issues)
        super().__init__("; ".join(str(i) for i in self.issues))

    @classmethod
    def single(cls, file: str, line: int | None, loc: str, message: str) -> ConfigError:
        return cls([ConfigIssue(file, line, loc, message)])

    @property
    def field(self) -> str | None:
        """The key path in the site file of the first problem (``scheduler.time``), if any."""
        return next((i.loc for i in self.issues if i.loc), None)

    def lines(self) -> list[str]:
        return [str(i) for i in self.issues]


class InputError(ClusterkitError):
    """A bad option or argument on the command line."""

    exit_code = ExitCode.USAGE


class PlanError(ClusterkitError):
    """The request cannot be planned on this site (node range, batch math, parallel sizes)."""

    exit_code = ExitCode.USAGE


class RunDirError(ClusterkitError):
    """The run directory cannot be written (exists, not writable, ...)."""

    exit_code = ExitCode.USAGE


class SnapshotError(ClusterkitError):
    """The code snapshot cannot be taken (past its limits, a script the command names missing from
    it: exit 2) or stored (the store's folders not yours alone, a write failing: exit 1)."""

    exit_code = ExitCode.USAGE

    def __init__(self, message: str, *, exit_code: ExitCode = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class PreflightError(ClusterkitError):
    """Preflight found bad nodes (or could not run at all)."""

    exit_code = ExitCode.FAILURE


class SubmitError(ClusterkitError):
    """The scheduler refused the job, or could not be reached."""

    exit_code = ExitCode.FAILURE


class SlurmUnreachable(SubmitError):
    """slurmctld did not answer (timed out, refused, authentication failed, client missing).
    The one such error, whichever command asked: exit 3 everywhere."""

    exit_code = ExitCode.UNREACHABLE


class LoginUnreachable(ClusterkitError):
    """The site's login node could not be reached over SSH (refused, timed out, host key unknown
    or changed, no key accepted): exit 3, as an unreachable Slurm controller."""

    exit_code = ExitCode.UNREACHABLE


class SlurmTextError(ClusterkitError):
    """Slurm printed something clusterkit cannot use (a partition's node list that is not a
    plain host list, ...): named, never guessed at."""

    exit_code = ExitCode.FAILURE


class RecordError(ClusterkitError):
    """A job record is missing, unreadable, or from an unknown version."""

    exit_code = ExitCode.FAILURE


class NoJobRecord(RecordError):
    """The JOB a command was given names no job record (or is not a job id): a usage error,
    exit 2 in every command that takes a JOB (``status``, ``logs``, ``cancel``, ``doctor``)."""

    exit_code = ExitCode.USAGE

