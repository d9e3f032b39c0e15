"""What the fault tests run as job steps on the testbed's nodes (python3, standard library only).

    net_probe.py serve PORT COUNT             accept COUNT connections on 0.0.0.0:PORT, read each to EOF
    net_probe.py send HOST PORT BYTES OUT     send BYTES to HOST:PORT; write {"node", "seconds"} to OUT
    net_probe.py reach HOST PORT OUT STOP     every 0.3 s try to connect to HOST:PORT (1 s timeout) and
                                              append "<time> ok|fail <why>" to OUT, until the file STOP exists
    net_probe.py spin LOOPS OUT               a compute loop of LOOPS iterations; write {"node", "seconds"} to OUT

Results go to files on the shared filesystem, not to the step's stdout: a node whose link is
down cannot send its output to srun.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time


def _write(path: str, seconds: float) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"node": socket.gethostname(), "seconds": seconds}, f)
    os.replace(tmp, path)


def serve(port: int, count: int) -> None:
    with socket.socket() as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
        srv.listen(16)
        for _ in range(count):
            conn, _ = srv.accept()
            with conn:
                while conn.recv(1 << 16):
                    pass


def send(host: str, port: int, size: int, out: str) -> None:
    deadline = time.monotonic() + 30
    while True:  # the receiver is another step, started at the same time
        try:
            conn = socket.create_connection((host, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    chunk = b"x" * (1 << 16)
    with conn:
        t0 = time.monotonic()
        sent = 0
        while sent < size:
            conn.sendall(chunk[: min(len(chunk), size - sent)])
            sent += min(len(chunk), size - sent)
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)  # the receiver closes once it has read everything
        _write(out, time.monotonic() - t0)


def reach(host: str, port: int, out: str, stop: str) -> None:
    while not os.path.exists(stop):
        try:
            with socket.create_connection((host, port), timeout=1):
                line = "ok"
        except OSError as exc:
            line = f"fail {type(exc).__name__}"
        with open(out, "a") as f:
            f.write(f"{time.time():.3f} {line}\n")
        time.sleep(0.3)


def spin(loops: int, out: str) -> None:
    t0 = time.monotonic()
    x = 0
    for i in range(loops):
        x += i * i % 7
    _write(out, time.monotonic() - t0)


def main(argv: list[str]) -> int:
    cmd, args = argv[0], argv[1:]
    if cmd == "serve":
        serve(int(args[0]), int(args[1]))
    elif cmd == "send":
        send(args[0], int(args[1]), int(args[2]), args[3])
    elif cmd == "reach":
        reach(args[0], int(args[1]), args[2], args[3])
    elif cmd == "spin":
        spin(int(args[0]), args[1])
    else:
        print(f"net_probe.py: unknown command {cmd}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
