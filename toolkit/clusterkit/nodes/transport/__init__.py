"""The one seam through which preflight touches nodes: run one script on many hosts.

Every runner has the same call::

    runner.run_many(hosts, script, *, timeout_s=None, fanout=None, on_result=None) -> RunResults

* ``hosts``: node names (duplicates are run once, the result keeps the input order).
* ``script``: bash source.  Each node runs it once, as ``bash -c SCRIPT`` (SSH sends the
  remote command ``bash -c '<quoted script>'``; srun and local run bash directly).  One
  connection and one remote command per node: callers put all their checks into one script
  and delimit the sections in its output.
* ``timeout_s``: the command timeout per node (default: the runner's ``command_timeout_s``).
  Connecting has its own bound (``connect_timeout_s``); a node never takes longer than
  about ``3 * connect_timeout_s + timeout_s``, whatever it does.
* ``fanout``: how many nodes are worked on at once (default: the runner's ``fanout``, 64).
* ``on_result``: called with each :class:`NodeOutput` as it finishes, in completion order,
  always from the calling thread (safe for a progress bar).

It returns :class:`RunResults`, a ``dict[host, NodeOutput]`` in input order with
``interrupted`` (Ctrl-C arrived: unfinished nodes carry ``error=INTERRUPTED``; callers should
report what they have and exit 130) and ``wall_s``.  Node-level trouble never raises: a node
that cannot be reached, refuses our key, shows an unknown or changed host key, or hangs is
one result with an :class:`ErrorKind` and a one-line ``reason``.  Bugs do raise.

Runners: :class:`SSHRunner` (paramiko, imported lazily), :class:`SrunRunner` (one task per
node inside a Slurm allocation), :class:`LocalRunner` (this machine).  This module runs
commands and returns their text; it does not parse it.
"""

from .base import (
                   DEFAULT_COMMAND_TIMEOUT_S,
                   DEFAULT_CONNECT_TIMEOUT_S,
                   DEFAULT_FANOUT,
                   MAX_OUTPUT_BYTES,
                   SSH_CONFIG_ENV,
                   ErrorKind,
                   NodeFailure,
                   NodeOutput,
                   ResultCallback,
                   Runner,
                   RunResults,
                   fan_out,
)
from .local import LocalRunner
from .srun import SrunRunner
from .ssh import SSHRunner
from .ssh_config import SSHTarget

__all__ = ["DEFAULT_COMMAND_TIMEOUT_S", "DEFAULT_CONNECT_TIMEOUT_S", "DEFAULT_FANOUT",
           "MAX_OUTPUT_BYTES", "SSH_CONFIG_ENV", "ErrorKind", "LocalRunner", "NodeFailure",
           "NodeOutput", "ResultCallback", "RunResults", "Runner", "SSHRunner", "SSHTarget",
           "SrunRunner", "fan_out"]
