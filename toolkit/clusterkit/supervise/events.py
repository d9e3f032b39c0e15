"""Signals as events: every signal the supervisor hears is queued, and read in order by its one
loop (no work in a signal handler).  Python's handlers run in the main thread between calls;
the wakeup pipe makes a wait with a timeout end as soon as one comes, SIGCHLD included (a
child's end is one more event)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
from collections.abc import Iterable


class Events:
    """The signals ``signals`` (and SIGCHLD) queued in the order they came."""

    def __init__(self, signals: Iterable[signal.Signals]) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self.pending: list[int] = []
        signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for sig in (*signals, signal.SIGCHLD):
            signal.signal(sig, self._note)

    def _note(self, signum: int, frame: object) -> None:
        self.pending.append(signum)

    def wait(self, timeout: float | None) -> list[int]:
        """The signals that came, oldest first (none after ``timeout`` seconds, or on a child's end)."""
        if not self.pending:
            with contextlib.suppress(InterruptedError):
                select.select([self._read], [], [], timeout)
        return self.take()

    def take(self) -> list[int]:
        """The signals that came so far, without waiting."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 512):
                pass
        came: list[int] = []
        while self.pending:   # one pop at a time: a handler may append meanwhile
            signum = self.pending.pop(0)
            if signum != signal.SIGCHLD:
                came.append(signum)
        return came


def die_by_term() -> None:
    """End this process by SIGTERM, as an untrapped TERM would: its parent sees the signal."""
    sys.stderr.flush()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
    raise SystemExit(143)   # not reached: the default action of SIGTERM ends the process
