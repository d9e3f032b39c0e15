"""Runs longer than one job: run names, dependencies (``--after``) and chains (``--chain N``).

A *run name* names one training run across jobs: ``CK_CHECKPOINT_DIR`` is
``<checkpoint storage>/checkpoints/<user>/<run name>``, so a resubmission with the same name, a requeue
and every member of a chain resume from the same directory.  Without ``--run-name`` it is the
job name and the first job id (``ck-train-1234``), so unrelated runs never share a directory.

A *chain* is N jobs, each waiting for the one before (``afterany``), sharing the first
member's run name.  A member whose launcher failed asks doctor's catalogue (on the batch host,
``clusterkit doctor --logs --category``) whether a restart can fix the failure; when it cannot
(:data:`clusterkit.diagnose.catalogue.NOT_FIXED_BY_RESTART`), the member writes
``<job id>.unfixable`` and cancels the later members listed in the chain's ids file.  A later
member that starts anyway (the ids file was not written yet) finds the mark at its start and
does the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from clusterkit import jobfiles
from clusterkit.errors import PlanError

RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
RUN_NAME_RULE = "use 1-128 letters, digits, '.', '_', '+' or '-', starting with a letter or digit"
_AFTER = re.compile(r"(?:(?P<site>[A-Za-z0-9][A-Za-z0-9._-]{0,63}):)?(?P<job>[0-9]{1,12})(?::(?P<kind>[A-Za-z]+))?")
#: The most members one --chain submits.
MAX_CHAIN = 100
#: The chain's ids file, in its first member's run directory: one Slurm job id a line, in order.
CHAIN_IDS = jobfiles.CHAIN_IDS


def check_run_name(name: str) -> str:
    """``name`` if it is a safe run name (it becomes a directory name on shared storage)."""
    if not RUN_NAME.fullmatch(name):
        raise PlanError(RUN_NAME_RULE, field="run_name", value=repr(name[:80]))
    return name


def default_run_name(job_name: str, job_id: str) -> str:
    """The run name of a job submitted without ``--run-name``: its name (a ':' in it as '-': the run
    name is a directory name, and ':' splits container mount lists) and its (first) job id."""
    return f"{job_name.replace(':', '-')}-{job_id}"


@dataclass(frozen=True)
class After:
    """``--after JOB[:ok|any]``: start once JOB ended (``any``) or ended successfully (``ok``)."""

    ref: str                         # the job as given: a Slurm job id, or SITE:JOB_ID (a clusterkit record)
    job_id: str
    kind: Literal["ok", "any"] = "ok"

    @property
    def dependency(self) -> str:
        return f"after{self.kind}:{self.job_id}"


def parse_after(text: str) -> After:
    """``"1234"``, ``"1234:any"``, ``"testbed:1234:ok"`` -> :class:`After` (the job's record, if any,
    is checked by :func:`clusterkit.chain.resolve_after`)."""
    m = _AFTER.fullmatch(text.strip())
    if m is None:
        raise PlanError("expected JOB[:ok|any], JOB a Slurm job id or SITE:JOB_ID (as `clusterkit status` shows it)",
                        field="after", value=repr(text[:80]))
    kind = (m.group("kind") or "ok").lower()
    if kind not in ("ok", "any"):
        raise PlanError(f"unknown condition {m.group('kind')!r}: use :ok (after it succeeded) or :any "
                        "(after it ended, however)", field="after", value=repr(text[:80]))
    ref = f"{m.group('site')}:{m.group('job')}" if m.group("site") else m.group("job")
    return After(ref, m.group("job"), "ok" if kind == "ok" else "any")


@dataclass(frozen=True)
class ChainLink:
    """Where one member stands in its chain (rendered into its job script)."""

    index: int                       # 1-based
    length: int
    ids_file: str                    # the chain's ids file (the first member's run directory)
    previous_id: str | None = None   # the member before, none for the first
    previous_run_dir: str | None = None
    unfixable: tuple[str, ...] = ()  # doctor's categories that stop the chain

    @property
    def last(self) -> bool:
        return self.index == self.length


def check_chain(n: int) -> int:
    if not 2 <= n <= MAX_CHAIN:
        raise PlanError(f"a chain has 2 to {MAX_CHAIN} jobs", field="chain", value=str(n))
    return n
