"""What ``doctor`` asks Slurm about one job beyond its state: its steps (sacct) and the job's
nodes Slurm holds down or drained (scontrol), through :class:`~clusterkit.scheduler.slurm.tables.SlurmQuery`."""

from __future__ import annotations

import re

from clusterkit.scheduler.slurm.tables import SlurmQuery, parse_sacct
from clusterkit.slurmtext import split_record
from clusterkit.tooltext import ParseFailure


def job_steps(job_id: str, query: SlurmQuery) -> list[dict[str, str]]:
    """Per-step rows from sacct (none where there is no accounting: slurmctld forgets steps)."""
    fields = ("JobID", "State", "ExitCode", "NodeList")
    proc = query.run(["sacct", "-P", "-n", "-j", job_id, "-o", ",".join(fields)], query.timeout_s)
    table = parse_sacct(proc.stdout, fields, skip_bad_rows=True) if proc.returncode == 0 else None
    if table is None or isinstance(table, ParseFailure):
        return []
    return [{"step": r.job_id, "state": r.fields["State"], "exit_code": r.fields["ExitCode"],
             "nodes": r.fields["NodeList"]} for r in table.rows if r.job_id.startswith(job_id)]


def down_nodes(nodes: str, query: SlurmQuery) -> list[tuple[str, str]]:
    """The nodes of ``nodes`` (a Slurm hostlist) that Slurm holds down or drained, with the reason it gives."""
    proc = query.run(["scontrol", "-o", "show", "node", nodes], query.timeout_s)
    out = []
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        kv = split_record(line)
        state = kv.get("State", "")
        if re.search(r"DOWN|DRAIN|FAIL", state):
            reason = kv.get("Reason")
            out.append((kv.get("NodeName", "?"), f"{state}" + (f" ({reason})" if reason else "")))
    return out
