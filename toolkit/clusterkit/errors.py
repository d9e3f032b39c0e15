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

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    UNREACHABLE = 3


class ClusterkitError(Exception):
    """Base of every error a user can cause or must act on."""

    exit_code: ExitCode = ExitCode.USAGE

    def lines(self) -> list[str]:
        """The message as one or more self-contained lines (one per problem)."""
        return [str(self)]


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


class RecordError(ClusterkitError):
    """A job record is missing, unreadable, or from an unknown version."""

    exit_code = ExitCode.FAILURE

