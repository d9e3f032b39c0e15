"""Run-time values in the training command and ``--launcher-arg`` words: ``{ck:NAME}``.

``--save ckpt/{ck:job_id}`` or ``--tensorboard-dir logs/{ck:job_id}/{ck:node_name}``: each
``{ck:NAME}`` is replaced where the launcher starts (on each node for a per-node launcher, so
``{ck:node_id}`` is that node's), by plain string replacement: the value is data, and nothing of the
user's text is evaluated by a shell (``$SLURM_JOB_ID``, ``$(...)`` and a sweep's ``{KEY}`` stay as
they were).  An unknown name is refused, so a typo does not run as text.

The launch body does the replacement: its own words (``--launcher-arg``) carry the values as shell
expansions (:func:`body_words`); the command, handed to the body as ``"$@"``, is rewritten word by
word with bash's ``${word//pattern/"$VALUE"}`` (:func:`body_head`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from clusterkit.errors import PlanError
from clusterkit.job.launchers.words import Sh, Word

PLACEHOLDER = re.compile(r"\{ck:([^{}\s]{0,40})\}")
#: name -> the shell expansion that gives its value where the launcher starts
VALUES = {
    "job_id": '"$CK_JOB_ID"',                             # the job (ARRAYJOB_TASK for an array task)
    "node_id": '"${SLURM_NODEID:-0}"',                    # the node's index in the job (0 on a local site)
    "node_rank": '"${SLURM_NODEID:-0}"',
    "node_name": '"${SLURMD_NODENAME:-$HOSTNAME}"',       # the host it runs on
    "restart": '"${SLURM_RESTART_COUNT:-0}"',             # how often Slurm requeued the job
    "array_index": '"$CK_ARRAY_INDEX"',                   # a job array's task index
    "run_dir": '"$CK_RUN_DIR"',                           # the run directory
}
PER_NODE = ("node_id", "node_rank", "node_name")
#: the values only a site's own launcher's argv uses that are known where it starts (config/launcher_keys.py;
#: its counts are the plan's, written in when it is planned: job/launchers/declared.py)
LAUNCH_VALUES = {
    "rdzv_host": '"$CK_HEAD"',                            # the rendezvous host (network.rendezvous_host's name)
    "rdzv_port": '"$CK_PORT"',                            # the job's port
    "hostfile": '"$CK_HOSTFILE"',                         # the hostfile of the job's hosts
}
_ALL = {**VALUES, **LAUNCH_VALUES}


def used(words: Sequence[str]) -> list[str]:
    return [m.group(1) for w in words for m in PLACEHOLDER.finditer(w)]


def check(command: Sequence[str], launcher_args: Sequence[str], *, once_multi: bool, array: bool,
          launcher: str) -> None:
    """Unknown names; ``{ck:array_index}`` outside a job array; a node's own value where one
    launcher starts every node's workers from the batch host (``once_multi``)."""
    for name in used([*command, *launcher_args]):
        if name not in VALUES:
            raise PlanError(f"{{ck:{name}}}: unknown run-time value; use one of "
                            + ", ".join(f"{{ck:{n}}}" for n in VALUES), field="command", value=repr(name))
        if name == "array_index" and not array:
            raise PlanError("{ck:array_index} is a job array's task index: add --array or --sweep",
                            field="command", value=repr(name))
        if name in PER_NODE and once_multi:
            raise PlanError(f"{{ck:{name}}}: {launcher} starts every node's workers from the batch host, "
                            "so one value would reach all nodes; use a launcher that runs on each node",
                            field="command", value=repr(name))


def _expanded(word: str) -> str:
    parts: list[str] = []
    pos = 0
    for m in PLACEHOLDER.finditer(word):
        if m.start() > pos:
            parts.append(shlex.quote(word[pos:m.start()]))
        parts.append(_ALL[m.group(1)])
        pos = m.end()
    if pos < len(word) or not parts:
        parts.append(shlex.quote(word[pos:]))
    return "".join(parts)


def body_words(words: Sequence[Word]) -> tuple[Word, ...]:
    """The launcher's words, each ``{ck:NAME}`` in a plain word as the shell expansion of its value."""
    return tuple(Sh(_expanded(w)) if not isinstance(w, Sh) and PLACEHOLDER.search(w) else w for w in words)


def body_head(command: Sequence[str]) -> str:
    """Launch-body lines that replace each ``{ck:NAME}`` the command uses in ``"$@"`` (none: nothing)."""
    names = sorted(set(used(command)))
    if not names:
        return ""
    subs = "".join(f"ck_w=${{ck_w//{shlex.quote('{ck:' + n + '}')}/{VALUES[n]}}}; " for n in names)
    return f'ck_args=(); for ck_w in "$@"; do {subs}ck_args+=("$ck_w"); done; set -- "${{ck_args[@]}}"; '
