"""The rendezvous host of a relaunch's head node (docs/architecture.md §3, "Recovery inside the
allocation"): the node's own name, or, where the site names the rendezvous host otherwise
(``network.rendezvous_host``), what the job's ``rendezvous-host.sh`` prints for that node, run on
the batch host as the job script ran it for the first head (``CK_RDZV_RESOLVE``).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Mapping

from clusterkit.tooltext import decode, printable

RESOLVE_TIMEOUT_S = 120.0
#: a host name (letters, digits, '.', '-') or a dotted IPv4 address, as the script prints it
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})")


def rendezvous_host(node: str, env: Mapping[str, str], log: Callable[[str], None]) -> str | None:
    """The host the launchers rendezvous at when ``node`` is the head; None (logged) when the
    site's rule gives none, so the caller does not relaunch."""
    script = env.get("CK_RDZV_RESOLVE", "")
    if not script:
        return node
    try:
        done = subprocess.run(["bash", script, node], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=RESOLVE_TIMEOUT_S, env=dict(env), check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log(f"recovery: no rendezvous host for {node} ({script}: {exc}); not relaunching")
        return None
    out = decode(done.stdout[:4096]).strip()
    if done.returncode != 0 or not _HOST.fullmatch(out) or ".." in out:
        why = printable(decode(done.stderr[-2048:]).strip().splitlines()[-1] if done.stderr.strip() else
                        f"exit {done.returncode}, printed {out[:80]!r}")
        log(f"recovery: no rendezvous host for {node} ({why}); not relaunching")
        return None
    return out
