"""What SSHRunner does on an open connection's bytes, and how it names a failed handshake:
bounded reads of a command's two streams until its end or a deadline, and the file-descriptor
limit a large fan-out needs (nodes/transport/ssh.py)."""

from __future__ import annotations

import select
import socket
import time
from typing import Any

from .base import MAX_OUTPUT_BYTES, ErrorKind, NodeFailure, _decode, _one_line
from .ssh_config import SSHTarget


def raise_fd_limit(needed: int) -> None:
    """Each node in flight holds a socket and a pipe pair: lift the soft limit (1024 by
    default) toward the hard one so a large fan-out does not fail with EMFILE."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        if target > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def handshake_failure(t: Any, target: SSHTarget, timeout: float) -> NodeFailure:
    """Name what went wrong before the SSH session was up."""
    where = f"{target.hostname}:{target.port}"
    exc = t.get_exception()
    cause = exc.__context__ if exc is not None else None
    text = str(exc) if exc is not None else ""
    if exc is None or isinstance(cause, (socket.timeout, TimeoutError)):
        what = "SSH banner" if "banner" in text or exc is None else "SSH handshake"
        return NodeFailure(ErrorKind.TIMEOUT, f"no {what} from {where} within {timeout:g} s "
                                              f"(not an SSH server, or overloaded)")
    if "banner" in text:
        return NodeFailure(ErrorKind.PROTOCOL, f"{where} closed the connection before the SSH "
                                               f"banner (sshd MaxStartups, or a filter)")
    return NodeFailure(ErrorKind.PROTOCOL, f"SSH handshake with {where} failed: "
                                           f"{_one_line(text or type(exc).__name__)}")


def drain(chan: Any, deadline: float) -> tuple[str, str, bool, bool]:
    """Read stdout and stderr until the command ends or ``deadline``; never block past it."""
    out, err = bytearray(), bytearray()
    truncated = False
    poller = select.poll()  # not select(): fds past 1024 with a large fan-out
    poller.register(chan.fileno(), select.POLLIN)  # paramiko's pipe: data on either stream, or close
    while True:
        while chan.recv_ready():
            truncated |= _append(out, chan.recv(65536))
        while chan.recv_stderr_ready():
            truncated |= _append(err, chan.recv_stderr(65536))
        drained = chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready()
        if drained and (chan.closed or chan.eof_received):
            return _decode(out), _decode(err), True, truncated
        if chan.closed:
            return _decode(out), _decode(err), chan.exit_status_ready(), truncated
        left = deadline - time.monotonic()
        if left <= 0:
            return _decode(out), _decode(err), False, truncated
        poller.poll(min(left, 1.0) * 1000)


def _append(buf: bytearray, data: bytes) -> bool:
    room = MAX_OUTPUT_BYTES - len(buf)
    buf.extend(data[: max(room, 0)])
    return len(data) > room
