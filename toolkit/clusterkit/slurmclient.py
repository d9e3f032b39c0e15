"""The one place clusterkit runs a Slurm client: squeue, sacct, scontrol, scancel, sinfo and
the preflight srun step (sbatch is submitit's).  Every call has a timeout, keeps at most
:data:`OUTPUT_LIMIT` bytes of each stream, and decodes leniently with control characters
removed, so what a client prints is bounded text before any parser reads it.

A client that is missing or does not answer in time is an answer, not an exception: exit
status 127 or 124 with a one-line message, as a shell would report it.  :func:`unreachable`
says whether an answer means slurmctld could not be reached, and :func:`require` turns that
into :class:`~clusterkit.errors.SlurmUnreachable` (exit 3), the one such error.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import IO

from clusterkit.errors import SlurmUnreachable
from clusterkit.slurmtext import UNREACHABLE, last_line

OUTPUT_LIMIT = 8 << 20  # bytes kept per stream: a whole cluster's `scontrol -o show node` fits
DEFAULT_TIMEOUT_S = 60.0
NOT_FOUND, TIMED_OUT = 127, 124
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

Run = Callable[[Sequence[str], float], "subprocess.CompletedProcess[str]"]


def decode(raw: bytes) -> str:
    """Client output as text: invalid UTF-8 replaced, control characters (but tab and newline) removed."""
    return _CONTROL.sub("", raw.decode("utf-8", errors="replace"))


def run(argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S, *,
        ignore_term: bool = False) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client; never waits longer than ``timeout_s`` (the client is killed then).

    Returns its exit status and bounded, decoded stdout and stderr; 127 when the client is not
    installed, 124 when it did not answer in time.  ``ignore_term``: the client runs with SIGTERM
    ignored (inside a job, where Slurm's TERM reaches every process of the job, a requeue's
    answer included).
    """
    args = list(argv)
    try:
        proc = start(args, stdin=subprocess.DEVNULL, ignore_term=ignore_term)
    except FileNotFoundError:  # worded as a shell words it
        return subprocess.CompletedProcess(args, NOT_FOUND, "", f"{args[0]}: command not found")
    except OSError as exc:
        return subprocess.CompletedProcess(args, NOT_FOUND, "", f"{args[0]}: {exc.strerror or 'cannot run'}")
    out, err = _Bounded(proc.stdout), _Bounded(proc.stderr)
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop(proc)
        return subprocess.CompletedProcess(args, TIMED_OUT, out.text(), f"{args[0]}: no answer in {timeout_s:g} s")
    return subprocess.CompletedProcess(args, rc, out.text(), err.text())


def start(argv: Sequence[str], *, env: dict[str, str] | None = None,
          stdin: int | None = subprocess.DEVNULL, ignore_term: bool = False) -> subprocess.Popen[bytes]:
    """Start a long-running client (srun) in its own session, stdout and stderr piped.

    Its own session: the terminal's Ctrl-C reaches clusterkit, which ends the client itself
    (:func:`stop`).  The caller reads the streams (bounded, with :func:`decode`); OSError when
    the client cannot be run.
    """
    return subprocess.Popen(list(argv), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            start_new_session=True, preexec_fn=_ignore_term if ignore_term else None)


def step(argv: Sequence[str], out: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start a short helper step (``srun --overlap``, or its node side on the batch host) in its
    own session, stdout and stderr to ``out``; end it with :func:`stop`.  OSError when it cannot
    be run."""
    return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)


def launch(argv: Sequence[str]) -> subprocess.Popen[bytes]:
    """Start a job's launch step (srun, or the launcher on the batch host) as a job script's
    ``&`` does: stdin from /dev/null, INT and QUIT ignored (a non-interactive shell's background
    command), the caller's process group, stdout and stderr the job's log.  OSError when it
    cannot be run."""
    return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, preexec_fn=_background)


def _background() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


def _ignore_term() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def stop(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """End a client and what it started: TERM to its session, KILL if it lingers."""
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


class _Bounded:
    """Reads a stream to its end in a thread, keeping the first OUTPUT_LIMIT bytes."""

    def __init__(self, stream: IO[bytes] | None) -> None:
        self.chunks: list[bytes] = []
        self.kept = 0
        self.dropped = 0
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: IO[bytes] | None) -> None:
        if stream is None:
            return
        with stream:
            for chunk in iter(lambda: stream.read(65536), b""):
                keep = chunk[:max(OUTPUT_LIMIT - self.kept, 0)]
                if keep:
                    self.chunks.append(keep)
                    self.kept += len(keep)
                self.dropped += len(chunk) - len(keep)

    def text(self) -> str:
        self.thread.join(timeout=5)
        text = decode(b"".join(self.chunks))
        return text + (f"\n[{self.dropped} more bytes not kept]\n" if self.dropped else "")


def unreachable(answer: subprocess.CompletedProcess[str]) -> str | None:
    """Why ``answer`` means slurmctld could not be reached (client missing, no answer in time,
    the words clients print for a controller that is down), or None for a real answer."""
    if answer.returncode in (NOT_FOUND, TIMED_OUT) or (answer.returncode != 0 and UNREACHABLE.search(answer.stderr)):
        return f"cannot reach Slurm controller: {last_line(answer.stderr)}"
    return None


def require(argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S, *, runner: Run = run) -> str:
    """A client's stdout; :class:`~clusterkit.errors.SlurmUnreachable` for any failure (a command
    whose failure leaves nothing to go on, such as the admin commands' ``scontrol show``)."""
    answer = runner(argv, timeout_s)
    if answer.returncode == 0:
        return answer.stdout
    why = unreachable(answer)
    raise SlurmUnreachable(why or f"'{' '.join(argv)}' failed (exit {answer.returncode}): "
                                  f"{last_line(answer.stderr or answer.stdout)}")
