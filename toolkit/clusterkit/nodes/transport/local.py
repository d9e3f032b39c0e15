"""LocalRunner: the script on this machine (``--transport local``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence

from .base import (
    DEFAULT_COMMAND_TIMEOUT_S,
    DEFAULT_FANOUT,
    ErrorKind,
    NodeOutput,
    ResultCallback,
    RunResults,
    _decode,
    _Watch,
    _Watchdog,
    fan_out,
)


class LocalRunner:
    """Runs the script on this machine, once per host name given (the name is a label only,
    exported to the script as ``CLUSTERKIT_HOST``).  For ``--transport local``."""

    name = "local"

    def __init__(self, *, command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S,
                 fanout: int = DEFAULT_FANOUT, env: dict[str, str] | None = None):
        self.command_timeout_s = command_timeout_s
        self.fanout = fanout
        self.env = env

    def run_many(self, hosts: Sequence[str], script: str, *, timeout_s: float | None = None,
                 fanout: int | None = None,
                 on_result: ResultCallback | None = None) -> RunResults:
        """Run ``bash -c script`` locally for every host; see the module docstring."""
        timeout = self.command_timeout_s if timeout_s is None else timeout_s
        return fan_out(hosts, lambda h, wd: self._run_one(h, script, timeout, wd),
                       fanout=fanout or self.fanout, budget_s=timeout + 10, on_result=on_result)

    def _run_one(self, host: str, script: str, timeout: float, watchdog: _Watchdog) -> NodeOutput:
        t0 = time.monotonic()
        env = dict(os.environ if self.env is None else self.env, CLUSTERKIT_HOST=host)
        try:
            # Own session: on timeout or Ctrl-C we kill the whole process group.
            proc = subprocess.Popen(["bash", "-c", script], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                    start_new_session=True)
        except OSError as exc:
            return NodeOutput(host, error=ErrorKind.LAUNCH, reason=f"cannot run bash: {exc}",
                              duration_s=time.monotonic() - t0)
        watch = _Watch(deadline=t0 + timeout + 5,
                       closer=lambda: os.killpg(proc.pid, signal.SIGKILL))
        watchdog.add(watch)
        try:
            out, err = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        finally:
            watchdog.remove(watch)
        dt = time.monotonic() - t0
        if timed_out or watch.expired:
            return NodeOutput(host, None, _decode(out), _decode(err), ErrorKind.COMMAND_TIMEOUT,
                              f"command still running after {timeout:g} s; killed", dt)
        return NodeOutput(host, proc.returncode, _decode(out), _decode(err), duration_s=dt)
