"""One SSH session to one host (a cluster's login node): commands with their output bounded or
streamed, and SFTP uploads checked against their sha256.  The connection is SSHRunner's (the
user's ``~/.ssh/config``, agent, known hosts and ProxyJump; host keys as preflight checks them);
paramiko is imported only here and in ssh.py.  docs/laptop.md."""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import select
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import NodeFailure
from .ssh import SSHRunner

if TYPE_CHECKING:
    import paramiko

_CHUNK = 1 << 20


class SessionError(Exception):
    """The session failed: ``kind`` is ``unreachable`` (no connection: refused, timed out, host key
    refused, no key accepted) or ``broken`` (the connection or a file transfer failed later)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class LoginSession:
    """An authenticated connection to ``host``; :meth:`close` (or ``with``) ends it."""

    def __init__(self, host: str, *, user: str | None = None, port: int | None = None,
                 proxy_jump: str | None = None, accept_new_host_keys: bool = False,
                 connect_timeout_s: float = 10.0):
        self.host = host
        self._runner = SSHRunner(user=user, port=port, jump_host=proxy_jump,
                                 accept_new_host_keys=accept_new_host_keys, connect_timeout_s=connect_timeout_s)
        self._timeout = connect_timeout_s
        self._transport: paramiko.Transport | None = None
        self._sftp: paramiko.SFTPClient | None = None

    def __enter__(self) -> LoginSession:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        import logging

        log = logging.getLogger("paramiko")
        if not log.handlers:   # paramiko logs failed handshakes with a traceback: said in one line instead
            log.addHandler(logging.NullHandler())
        try:
            self._transport = self._runner.connect(self.host)
        except NodeFailure as f:
            self._runner.close()
            raise SessionError("unreachable", f.reason) from None

    def close(self) -> None:
        if self._sftp is not None:
            with contextlib.suppress(Exception):
                self._sftp.close()
        if self._transport is not None:
            self._transport.close()
        self._runner.close()

    def _channel(self, argv: Sequence[str]) -> Any:
        import paramiko

        if self._transport is None:
            raise SessionError("broken", "not connected")
        try:
            chan = self._transport.open_session(timeout=self._timeout)
            chan.exec_command(shlex.join(argv))   # every word quoted: the remote shell evaluates none
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise SessionError("broken", f"cannot start a command on {self.host}: {exc or 'closed'}") from None
        return chan

    def capture(self, argv: Sequence[str], *, timeout_s: float) -> tuple[int, str, str]:
        """Run ``argv``; its exit status and its output (each stream at most MAX_OUTPUT_BYTES, decoded
        leniently).  A command still running after ``timeout_s`` is a ``broken`` session."""
        from .ssh_io import drain

        chan = self._channel(argv)
        try:
            out, err, finished, _ = drain(chan, time.monotonic() + timeout_s)
            if not finished or not chan.exit_status_ready():
                raise SessionError("broken", f"{argv[0]} on {self.host} gave no answer within {timeout_s:g} s")
            return chan.recv_exit_status(), out, err
        finally:
            chan.close()

    def stream(self, argv: Sequence[str], out: Callable[[bytes], None], err: Callable[[bytes], None]) -> int:
        """Run ``argv`` until it ends, handing its output over as it comes; its exit status."""
        chan = self._channel(argv)
        poller = select.poll()
        poller.register(chan.fileno(), select.POLLIN)
        try:
            while True:
                while chan.recv_ready():
                    out(chan.recv(65536))
                while chan.recv_stderr_ready():
                    err(chan.recv_stderr(65536))
                drained = chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready()
                if drained and (chan.closed or chan.eof_received):
                    return int(chan.recv_exit_status())
                if chan.closed:
                    if chan.exit_status_ready():
                        return int(chan.recv_exit_status())
                    raise SessionError("broken", f"the connection to {self.host} closed before the command ended")
                poller.poll(1000)
        finally:
            chan.close()

    # -- files --------------------------------------------------------------------------

    def _client(self) -> paramiko.SFTPClient:
        import paramiko

        if self._sftp is None:
            if self._transport is None:
                raise SessionError("broken", "not connected")
            try:
                self._sftp = paramiko.SFTPClient.from_transport(self._transport)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                raise SessionError("broken", f"no SFTP on {self.host}: {exc or 'closed'}") from None
            if self._sftp is None:
                raise SessionError("broken", f"no SFTP on {self.host}")
        return self._sftp

    def listdir(self, path: str) -> list[str]:
        """The names in the folder ``path`` (relative: to the home folder); empty when it is missing."""
        try:
            return self._client().listdir(path)
        except FileNotFoundError:
            return []
        except (OSError, EOFError) as exc:
            raise SessionError("broken", f"cannot list {path} on {self.host}: {exc}") from None

    def makedirs(self, path: str, mode: int = 0o700) -> None:
        """Make ``path`` and its missing parents (relative: to the home folder)."""
        sftp = self._client()
        done = ""
        for part in path.strip("/").split("/"):
            done = f"{done}/{part}" if done else ("/" + part if path.startswith("/") else part)
            try:
                sftp.mkdir(done, mode)
            except OSError:
                try:
                    sftp.stat(done)
                except OSError as exc:
                    raise SessionError("broken", f"cannot create {done} on {self.host}: {exc}") from None

    def put_checked(self, local: Path, remote: str, sha256: str, mode: int) -> None:
        """Copy ``local`` to ``remote`` under a new temporary name, then rename it into place once
        its bytes are known to hash to ``sha256`` (a file that changed since it was hashed is refused)."""
        def fill(dst: Any) -> None:
            digest = hashlib.sha256()
            with open(local, "rb") as src:
                dst.set_pipelined(True)
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    dst.write(chunk)
            if digest.hexdigest() != sha256:
                raise SessionError("changed", f"{local} changed while it was uploaded; submit again")

        self._place(remote, mode, fill, f"cannot upload {local} to {self.host}:{remote}")

    def put_bytes(self, data: bytes, remote: str, mode: int = 0o400) -> None:
        """Write ``data`` as ``remote`` (a new temporary name, renamed into place)."""
        self._place(remote, mode, lambda dst: dst.write(data), f"cannot write {self.host}:{remote}")

    def _place(self, remote: str, mode: int, fill: Callable[[Any], object], failed: str) -> None:
        """``fill`` writes a new temporary file beside ``remote``, which is then given ``mode`` and
        renamed into place; the temporary file never stays behind."""
        sftp = self._client()
        tmp = f"{remote.rsplit('/', 1)[0]}/.up-{secrets.token_hex(8)}"
        try:
            with sftp.open(tmp, "wx") as dst:
                fill(dst)
            sftp.chmod(tmp, mode)
            sftp.posix_rename(tmp, remote)
        except (OSError, EOFError) as exc:
            raise SessionError("broken", f"{failed}: {exc}") from None
        finally:
            with contextlib.suppress(OSError, EOFError):
                sftp.remove(tmp)


