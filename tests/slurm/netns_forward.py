"""TCP forwarder from this machine's loopback into the test cluster's controller namespace.

    python3 netns_forward.py NETNS_PATH PIDFILE PORT [PORT...]

Listens on 127.0.0.1:PORT (in the network namespace it was started in), then joins the
network namespace at NETNS_PATH (``/run/netns/NAME``) with setns(2), so every connection it
opens from then on is made inside that namespace: a client connecting to 127.0.0.1:PORT here
reaches 127.0.0.1:PORT there (slurmctld, slurmdbd).  No address is added to the starting
namespace.

A client must see what it would see without the forwarder: while nothing listens on PORT in
the controller's namespace (slurmctld stopped), the listener here stops listening too, so a
connection is refused at once ("Connection refused", as Slurm's clients expect), not accepted
and then dropped.  Whether PORT listens there is read from that namespace's /proc/net/tcp
every 0.1 s (no probe connections: slurmctld would log each one).

The pid file is written once every listener is bound (the ready signal for ``testbed.sh``);
SIGTERM stops it.  Started and stopped by ``testbed.sh`` only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import struct
import sys
import threading
import time

CLONE_NEWNET = 0x40000000
PR_SET_NAME = 15
POLL_S = 0.1


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _setns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc().setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def _listening(port: int) -> bool:
    """Whether something listens on 127.0.0.1:port or *:port in this thread's namespace."""
    try:
        with open("/proc/thread-self/net/tcp") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return True
    want = f"{port:04X}"
    for line in lines:
        parts = line.split()
        if len(parts) > 3 and parts[3] == "0A":  # TCP_LISTEN
            addr, _, p = parts[1].partition(":")
            if p == want and addr in ("0100007F", "00000000"):
                return True
    return False


def _reset(sock: socket.socket) -> None:
    """Close with a reset, as a closed port answers."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _pipe(client: socket.socket, upstream: socket.socket) -> None:
    """Copy both ways until both sides have closed (half-closes passed on)."""
    peers = {client: upstream, upstream: client}
    open_in = {client, upstream}
    try:
        while open_in:
            ready, _, _ = select.select(list(open_in), [], [], 3600)
            if not ready:
                return
            for s in ready:
                data = s.recv(65536)
                if data:
                    peers[s].sendall(data)
                else:
                    open_in.discard(s)
                    with contextlib.suppress(OSError):
                        peers[s].shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        client.close()
        upstream.close()


class Port:
    """One forwarded port: a listener here that listens only while its target listens there."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(512)
        self.listening = True
        self.lock = threading.Lock()
        self.up = threading.Event()
        self.up.set()

    def set_listening(self, on: bool) -> None:
        with self.lock:
            if on == self.listening:
                return
            if on:
                self.sock.listen(512)  # the socket kept its address: listening again
                self.up.set()
            else:
                self.up.clear()
                with contextlib.suppress(OSError):
                    self.sock.shutdown(socket.SHUT_RDWR)  # a listening socket: stop listening
            self.listening = on

    def accept_loop(self) -> None:
        while True:
            self.up.wait()
            try:
                client, _ = self.sock.accept()
            except OSError:
                time.sleep(0.01)  # stopped listening under us
                continue
            threading.Thread(target=self.serve, args=(client,), daemon=True).start()

    def serve(self, client: socket.socket) -> None:
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # made in the controller's namespace
        upstream.settimeout(10)
        try:
            upstream.connect(("127.0.0.1", self.port))
        except OSError:
            upstream.close()
            self.set_listening(False)
            _reset(client)
            return
        upstream.settimeout(None)
        _pipe(client, upstream)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or not all(p.isdigit() for p in argv[2:]):
        print("usage: netns_forward.py NETNS_PATH PIDFILE PORT [PORT...]", file=sys.stderr)
        return 2
    netns, pidfile, ports = argv[0], argv[1], [Port(int(p)) for p in argv[2:]]  # bound here
    _setns(netns)  # from now on, this thread and every thread it starts live in the controller's namespace
    _libc().prctl(PR_SET_NAME, b"slurmlab-fwd", 0, 0, 0)  # comm, for testbed.sh's stop logic
    for p in ports:
        threading.Thread(target=p.accept_loop, daemon=True).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    tmp = f"{pidfile}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(tmp, pidfile)
    while not stop.wait(POLL_S):
        for p in ports:
            p.set_listening(_listening(p.port))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
