"""Slurm's tables as text: ``sacct --parsable2``, ``squeue``, ``scontrol -o show job``; and
:class:`SlurmQuery`, which asks Slurm about many jobs in a constant number of calls.

The parsers are total and pure: they run nothing and never raise on bad input.  Text that is
not the expected table becomes a :class:`ParseFailure` keeping the raw text (or, with
``skip_bad_rows``, the rows that do not fit are left out: the status query reads what it can).

Status for many jobs costs a constant number of scheduler calls, never one per job:

1. one ``squeue --states=all -j ID,ID,...``: pending/running jobs and finished ones still in
   slurmctld's memory (``MinJobAge``);
2. one ``sacct -X -D -j ID,ID,...``: exit codes, restart counts (one line per run), and jobs
   slurmctld has already forgotten;
3. only when sacct fails (no slurmdbd: "accounting storage is disabled", or no sacct at
   all): one ``scontrol -o show job`` for exit codes and restart counts.

"Ended" is never concluded from silence: when squeue fails for any reason other than "these
job ids are unknown" (a busy controller timing out, an authentication failure, no squeue at
all), :meth:`SlurmQuery.states` raises :class:`~clusterkit.errors.SlurmUnreachable`.  Every
command runs through :mod:`clusterkit.slurmclient`; records are split by :mod:`clusterkit.slurmtext`.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from clusterkit import slurmclient
from clusterkit.errors import SlurmUnreachable
from clusterkit.scheduler.base import JobStatus
from clusterkit.slurmtext import last_line, parse_exit_code, split_record
from clusterkit.slurmtext import lines as slurm_lines
from clusterkit.tooltext import ParseFailure, clip, failure, first_line
from clusterkit.vocab import JobState, is_job_id

# squeue's only failure that is an answer: none of the ids asked about is known to slurmctld.
_NO_SUCH_JOBS = re.compile(r"Invalid job id specified", re.I)


# --------------------------------------------------------------------------- sacct


@dataclass(frozen=True)
class SacctRow:
    """One ``sacct --parsable2`` row.  ``state`` is the bare state (``CANCELLED by 0`` -> CANCELLED)."""

    fields: dict[str, str]
    state: str
    state_detail: str = ""
    raw: str = field(default="", compare=False)

    @property
    def job_id(self) -> str:
        """``JobIDRaw`` when asked for (an array task's own id), else ``JobID`` (``4246_3``)."""
        return self.fields.get("JobIDRaw") or self.fields.get("JobID", "")

    @property
    def is_step(self) -> bool:
        """Rows like ``123.batch``, ``123.extern``, ``123.0`` are steps, not the job itself."""
        return "." in self.job_id

    @property
    def exit_code(self) -> tuple[int, int] | None:
        """``ExitCode`` ``"1:0"`` -> (1, 0): (exit status, signal)."""
        m = re.fullmatch(r"(\d+):(\d+)", self.fields.get("ExitCode", ""))
        return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class SacctTable:
    rows: tuple[SacctRow, ...]
    raw: str = ""

    def job_rows(self, job_id: str | None = None) -> list[SacctRow]:
        """The job-level rows (no steps), in order; with --duplicates a requeued job has several."""
        return [r for r in self.rows
                if not r.is_step and (job_id is None or r.job_id.split("_")[0] == job_id or r.job_id == job_id)]


def _split_state(state: str) -> tuple[str, str]:
    parts = state.strip().split(None, 1)
    return (parts[0] if parts else "", parts[1] if len(parts) > 1 else "")


def parse_sacct(text: str, fields: Sequence[str] | None = None, *,
                skip_bad_rows: bool = False, sep: str = "|") -> SacctTable | ParseFailure:
    """Parse ``sacct --parsable2`` output (job rows and step rows, any ``--format`` fields).

    With ``fields`` None, the first line must be the header (sacct's default); pass the
    ``--format`` field names when the output was made with ``--noheader``.  ``sep`` is
    sacct's ``--delimiter``; ``--parsable``'s delimiter at the end of every row is no field.
    A row with the wrong number of fields fails the whole table, or is left out with
    ``skip_bad_rows``.
    """
    what = "sacct --parsable2"
    lines = [ln for ln in slurm_lines(text) if ln.strip()]
    if fields is None:
        if not lines or (sep not in lines[0] and lines[0].strip() != "JobID"):
            return failure(what, "no header line", text or "")
        fields, lines = [f.strip() for f in lines[0].split(sep)], lines[1:]
        if fields[-1] == "" and len(fields) > 1:
            fields = fields[:-1]
    rows: list[SacctRow] = []
    for n, line in enumerate(lines, start=1):
        cells = line.split(sep)
        if len(cells) == len(fields) + 1 and cells[-1] == "":
            cells = cells[:-1]
        if len(cells) != len(fields):
            if skip_bad_rows:
                continue
            return failure(what, f"row {n} has {len(cells)} fields, expected {len(fields)}", text)
        row = dict(zip(fields, cells, strict=True))
        state, detail = _split_state(row.get("State", ""))
        rows.append(SacctRow(row, state, detail, line))
    return SacctTable(tuple(rows), clip(text or ""))


# --------------------------------------------------------------------------- squeue


@dataclass(frozen=True)
class SqueueRow:
    fields: dict[str, str]
    raw: str = field(default="", compare=False)

    @property
    def job_id(self) -> str:
        return self.fields.get("JOBID", "")

    @property
    def state(self) -> str:
        return self.fields.get("STATE", self.fields.get("ST", ""))


# squeue's default header (-o "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"): the last column
# NODELIST(REASON) may contain spaces, e.g. "(ReqNodeNotAvail, UnavailableNodes:gpu003)".
_SQUEUE_DEFAULT = ("JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "NODELIST(REASON)")


def parse_squeue(text: str, fields: Sequence[str] | None = None, sep: str = "|", *,
                 skip_bad_rows: bool = False) -> tuple[SqueueRow, ...] | ParseFailure:
    """Parse ``squeue`` output.

    ``fields`` None: the default human format with its header line (whitespace columns, the
    last one taking the rest of the line).  Otherwise the output of
    ``squeue --noheader -o '%i|%T|...'`` with those (upper-case) field names, split on ``sep``.
    """
    what = "squeue"
    lines = [ln for ln in slurm_lines(text) if ln.strip()]
    rows: list[SqueueRow] = []
    if fields is None:
        if not lines or lines[0].split() != list(_SQUEUE_DEFAULT):
            return failure(what, f"unexpected header {first_line(text or '')[:80]!r}", text or "")
        for n, line in enumerate(lines[1:], start=1):
            cells = line.split(None, len(_SQUEUE_DEFAULT) - 1)
            if len(cells) != len(_SQUEUE_DEFAULT):
                if skip_bad_rows:
                    continue
                return failure(what, f"row {n} has {len(cells)} columns", text)
            rows.append(SqueueRow(dict(zip(_SQUEUE_DEFAULT, cells, strict=True)), line))
        return tuple(rows)
    for n, line in enumerate(lines, start=1):
        cells = line.split(sep)
        if len(cells) != len(fields):
            if skip_bad_rows:
                continue
            return failure(what, f"row {n} has {len(cells)} fields, expected {len(fields)}", text)
        rows.append(SqueueRow(dict(zip(fields, (c.strip() for c in cells), strict=True)), line))
    return tuple(rows)


# --------------------------------------------------------------------------- scontrol

def parse_scontrol_jobs(text: str) -> list[dict[str, str]]:
    """``scontrol -o show job`` (one job per line, ``Key=Value`` fields): one dict per job."""
    jobs = [split_record(line) for line in slurm_lines(text)]
    return [kv for kv in jobs if is_job_id(kv.get("JobId", ""))]


# --------------------------------------------------------------------------- tables -> job statuses

SQUEUE_FORMAT = "%i|%T|%r|%N"
SQUEUE_FIELDS = ("JOBID", "STATE", "REASON", "NODELIST")
SACCT_FIELDS = ("JobIDRaw", "State", "ExitCode", "NodeList")
# a run that ended in one of these states is followed by another run of the same job
_REQUEUED = (JobState.REQUEUED, JobState.REQUEUE_HOLD, JobState.REQUEUE_FED)


def squeue_statuses(text: str) -> dict[str, JobStatus]:
    """``squeue -h -o '%i|%T|%r|%N'`` output -> job id -> status (lines that do not fit skipped)."""
    rows = parse_squeue(text, SQUEUE_FIELDS, skip_bad_rows=True)
    out: dict[str, JobStatus] = {}
    for r in rows if isinstance(rows, tuple) else ():
        if not is_job_id(r.job_id):  # a header line, garbage
            continue
        reason, nodes = r.fields["REASON"], r.fields["NODELIST"]
        out[r.job_id] = JobStatus(state=JobState.parse(r.state), reason=None if reason in ("", "None") else reason,
                                  nodes=nodes or None, source="squeue", raw=r.raw)
    return out


def sacct_statuses(text: str, fields: Sequence[str] = SACCT_FIELDS, sep: str = "|") -> dict[str, JobStatus]:
    """``sacct -X -D -P -o JobIDRaw,State,ExitCode,NodeList`` (header line optional) -> job id -> status.

    Job steps (``123.batch``) are skipped.  With ``-D`` (``--duplicates``) a requeued job has
    one line per run, oldest first: the last one (the current run) gives the state, and the
    runs before it the restart count.  A last run that ended ``REQUEUED`` counts as a restart
    too: its successor is pending but not recorded yet.  A table without ``ExitCode`` or
    ``NodeList`` (another ``--format``) gives statuses without them, never an error.
    """
    table = parse_sacct(text, fields, skip_bad_rows=True, sep=sep)
    out: dict[str, JobStatus] = {}
    runs: dict[str, int] = {}
    for r in table.rows if isinstance(table, SacctTable) else ():
        jid = r.job_id.strip()
        if not is_job_id(jid):  # steps, a header line, garbage
            continue
        exit_code, sig = parse_exit_code(r.fields.get("ExitCode", ""))
        nodes = r.fields.get("NodeList", "").strip()
        runs[jid] = runs.get(jid, 0) + 1
        state = JobState.parse(r.state)
        restarts = runs[jid] - 1 + (1 if state in _REQUEUED else 0)
        out[jid] = JobStatus(state=state, exit_code=exit_code, signal=sig, restarts=restarts,
                             nodes=None if nodes in ("", "None assigned") else nodes, source="sacct", raw=r.raw)
    return out


def scontrol_statuses(text: str) -> dict[str, JobStatus]:
    """``scontrol -o show job`` -> job id -> status (with the restart count)."""
    out: dict[str, JobStatus] = {}
    for kv in parse_scontrol_jobs(text):
        exit_code, sig = parse_exit_code(kv.get("ExitCode", ""))
        restarts = kv.get("Restarts", "")
        reason = kv.get("Reason", "")
        out[kv["JobId"]] = JobStatus(
            state=JobState.parse(kv.get("JobState", "")), exit_code=exit_code, signal=sig,
            reason=None if reason in ("", "None") else reason,
            nodes=None if kv.get("NodeList", "") in ("", "(null)") else kv.get("NodeList"),  # pending: "NodeList="
            restarts=int(restarts) if restarts.isdigit() else None, source="scontrol",
            raw=" ".join(f"{k}={v}" for k, v in kv.items()),
        )
    return out


# --------------------------------------------------------------------------- the query

@dataclass
class SlurmQuery:
    """Queries Slurm for many jobs at once, counting the calls it makes (for tests and bench)."""

    run: slurmclient.Run = slurmclient.run
    timeout_s: float = 30.0
    calls: list[list[str]] = field(default_factory=list)
    # set by refresh() when slurmctld did not answer: why (Slurm's own words)
    unreachable: str | None = None

    def _call(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        return self.run(argv, self.timeout_s)

    def states(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:
        """job id -> status for every id Slurm still knows (absent ids are unknown to it)."""
        ids = sorted(set(job_ids), key=lambda j: (len(j), j))
        if not ids:
            return {}
        joined = ",".join(ids)
        sq = self._call(["squeue", "-h", "--states=all", "-j", joined, "-o", SQUEUE_FORMAT])
        if sq.returncode != 0 and not _NO_SUCH_JOBS.search(sq.stderr):
            # Any other failure (timeout, refused, authentication, no squeue) says nothing
            # about the jobs: a job absent from an answer that never came has not ended.
            raise SlurmUnreachable(f"cannot reach Slurm controller: {last_line(sq.stderr)}")
        live = squeue_statuses(sq.stdout) if sq.returncode == 0 else {}
        acct = self._call(["sacct", "-X", "-D", "-P", "-n", "-j", joined, "-o", ",".join(SACCT_FIELDS)])
        if acct.returncode == 0:
            extra = sacct_statuses(acct.stdout)
        else:  # no slurmdbd (or no sacct): slurmctld's own memory has the exit codes
            ctl = self._call(["scontrol", "-o", "show", "job"])
            extra = scontrol_statuses(ctl.stdout) if ctl.returncode == 0 else {}
        out: dict[str, JobStatus] = {}
        for jid in ids:
            a, b = live.get(jid), extra.get(jid)
            st = a.merged(b) if a and b else (a or b)
            if st is None:
                continue
            if not st.terminal:  # slurmctld reports 0:0 for a job that has not ended yet
                st = replace(st, exit_code=None, signal=None)
            out[jid] = st
        return out
