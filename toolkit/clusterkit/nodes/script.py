"""The one remote script every node runs: sections of shell text, each guarded by ``timeout``
(but those that only read kernel tables, which cannot hang), and the splitting of a node's
output back into those sections.

The script is POSIX sh.  It starts as few programs as it can (on a test machine whose nodes
share its cores, the nodes' own work is most of a large preflight's cost): a section that is
one simple command runs under ``timeout`` directly, with no ``sh`` between.

Each node runs the whole script once - one connection, one command - and its output is split
back into sections by markers carrying a random token, so nothing a node prints can forge a
section boundary.  Paths are read through ``${CLUSTERKIT_SYSROOT:-}`` (empty on real nodes) so
a test node can serve its own sysfs, mount table and storage tree.  This module knows nothing
about SSH or about checks: it makes text and splits text.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

# timeout(1) exits 124 when it stopped the command, 137 (128 + KILL) when -k had to kill it.
TIMEOUT_RCS = {"124", "137"}
SKIPPED_RC = "skip"



@dataclass(frozen=True)
class Section:
    """One command of the remote script.  ``command`` is shell text with every value quoted."""

    name: str  # [a-z0-9_]+ : also a shell variable suffix
    command: str
    timeout_s: float
    unless_timed_out: str | None = None  # skip this section if that one timed out (hung mount)
    # Reads kernel tables only (procfs, module directories), which cannot hang: runs in a
    # subshell of the script, without timeout(1) and sh (two fewer programs started per node).
    inline: bool = False
    # One simple command (words and redirections, no ``;``, ``&&``, ``$(...)`` or control
    # flow): the script's shell expands it and timeout(1) runs the program itself, no sh.
    simple: bool = False


@dataclass(frozen=True)
class SectionOutput:
    """What one section printed (stdout and stderr together) and how it ended."""

    name: str
    text: str
    rc: str | None  # exit status as printed, "skip", or None when the END marker never came

    @property
    def timed_out(self) -> bool:
        return self.rc in TIMEOUT_RCS



# ---------------------------------------------------------------------------------------------
# the remote script
# ---------------------------------------------------------------------------------------------

_PRELUDE = r"""# clusterkit preflight: one script per node, sections delimited by markers.
CK_ROOT=${CLUSTERKIT_SYSROOT:-}
CK_HOST=${HOSTNAME:-$(uname -n)}
export CK_ROOT CK_HOST
ck_m=%(marker)s
ck_section() {
    # $1 name  $2 timeout (s; 0 = runs inline)  $3 section that must not have timed out ('' = none)
    # $4 shell text  $5 'x': $4 is one simple command, run by timeout(1) without sh
    printf '\n%%s BEGIN %%s\n' "$ck_m" "$1"
    if [ -n "$3" ] && eval "[ \"\${ck_rc_$3:-}\" = 124 ] || [ \"\${ck_rc_$3:-}\" = 137 ]"; then
        echo "skipped: section $3 timed out"
        ck_rc=skip
    elif [ "$2" = 0 ]; then
        (eval "$4") </dev/null 2>&1
        ck_rc=$?
    elif [ "${5:-}" = x ]; then
        eval "timeout -k 2 $2 $4" </dev/null 2>&1
        ck_rc=$?
    else
        timeout -k 2 "$2" sh -c "$4" </dev/null 2>&1
        ck_rc=$?
    fi
    eval "ck_rc_$1=\$ck_rc"
    printf '\n%%s END %%s %%s\n' "$ck_m" "$1" "$ck_rc"
}
"""


def seconds_text(t: float) -> str:
    return f"{max(t, 0.1):g}"


def new_token() -> str:
    """A fresh marker token: nothing a node prints can guess it."""
    return secrets.token_hex(8)


def build_script(sections: Sequence[Section], token: str) -> str:
    """The POSIX sh script every node runs: the prelude, then one ``ck_section`` per section."""
    marker = f"@@ck-{token}@@"
    lines = [_PRELUDE % {"marker": shlex.quote(marker)}]
    for s in sections:
        if not re.fullmatch(r"[a-z0-9_]+", s.name):
            raise ValueError(f"section name {s.name!r} must be [a-z0-9_]+")  # a bug, not user input
        after = shlex.quote(s.unless_timed_out or "")
        limit = "0" if s.inline else seconds_text(s.timeout_s)
        direct = " x" if s.simple and not s.inline else ""
        lines.append(f"ck_section {s.name} {limit} {after} {shlex.quote(s.command)}{direct}")
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
