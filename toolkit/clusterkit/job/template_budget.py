"""The budget a site's own templates render within (docs/architecture.md §1: the one clock of
``job/``), from compile to output.

Jinja folds constant expressions while it compiles (``{{ "%0250000000d" % 1 }}`` or
``{{ "x" | center(250000000) }}`` become a 250 MB constant before rendering starts), so the site
environment compiles without the optimizer and with a context finalizer (which keeps output
nodes from being evaluated at compile time), ``%`` is checked like ``*``, compiling happens
inside the budget, and the whole of it runs under an address-space limit: whatever a filter or
method allocates past :data:`TEMPLATE_MEMORY` bytes is a ``MemoryError``, reported as a
template over its budget."""

from __future__ import annotations

import contextlib
import operator
import os
import re
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import jinja2

#: Address space a site template's compile and render may add to the process, in bytes.
TEMPLATE_MEMORY = 192 * 1024 * 1024
#: Largest field width or precision a '%' format may ask for.
MAX_FIELD = 4096
_FIELDS = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


class OverBudget(Exception):
    """The template ran past its time, or an expression would build more than the budget allows."""


class TemplateTooLarge(OverBudget):
    """A template expression would build more than the budget allows."""


@jinja2.pass_context
def _finalize(context: Any, value: Any) -> Any:
    return value


#: Environment options for a site's templates: nothing evaluated at compile time.
SITE_OPTIONS: dict[str, Any] = {"optimized": False, "finalize": _finalize}


def checked_mod(left: Any, right: Any) -> Any:
    """``left % right``, refusing a format whose width or precision is a '*' or past MAX_FIELD."""
    if isinstance(left, str):
        for m in _FIELDS.finditer(left):
            for part in m.groups():
                if part == "*" or (part is not None and int(part) > MAX_FIELD):
                    raise TemplateTooLarge(f"format field {m.group(0)[:20]!r} is wider than {MAX_FIELD}")
    return operator.mod(left, right)


def _address_space() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def memory_cap(extra: int = TEMPLATE_MEMORY) -> Iterator[None]:
    """RLIMIT_AS at the process's current address space plus ``extra`` while the block runs
    (Linux; elsewhere, or where the limit cannot be lowered, no cap), restored after."""
    try:
        import resource
    except ImportError:
        yield
        return
    used = _address_space()
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        used = None
    if used is None:
        yield
        return
    cap = used + extra
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield
        return
    try:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def chunks(generated: Iterable[str], seconds: float) -> Iterator[str]:
    """The template's output, chunk by chunk, checked against the clock between chunks."""
    end = time.monotonic() + seconds
    for chunk in generated:
        if time.monotonic() > end:  # the alarm covers loops that print nothing
            raise OverBudget(f"rendering took longer than {seconds:g} s")
        yield chunk


class deadline:
    """SIGALRM after ``seconds`` (main thread only: elsewhere the per-chunk check stands alone)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.armed = False

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
            self.previous = signal.signal(signal.SIGALRM, self._expired)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self.armed = True

    def _expired(self, signum: int, frame: Any) -> None:
        raise OverBudget(f"rendering took longer than {self.seconds:g} s")

    def __exit__(self, *exc: Any) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
