"""The bare loops ``bench/preflight.py`` times beside clusterkit's runner, clush and pdsh: one
process each, started inside the SSH lab's namespace as ``preflight_loops.py TOOL SPEC.json``;
each prints ``{"ok": n, "failed": {host: why}}``.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

SCRIPT = 'printf "node=%s\\n" "$CLUSTERKIT_LAB_NODE"; read -r load _ < /proc/loadavg; echo "load=$load"'
FANOUT = 64
TIMEOUT_S = 10


def inner_clusterkit(spec: dict[str, Any]) -> dict[str, Any]:
    from clusterkit.nodes.transport import SSHRunner

    runner = SSHRunner(known_hosts=spec["known_hosts"], ssh_config=spec["ssh_config"],
                       connect_timeout_s=TIMEOUT_S, command_timeout_s=30, fanout=FANOUT)
    res = runner.run_many(spec["hosts"], SCRIPT)
    out = _summary({h: (r.ok and "node=" in r.stdout, r.reason) for h, r in res.items()})
    slow = sorted(res.values(), key=lambda r: -r.duration_s)[:3]
    out["slowest"] = [f"{r.host} {r.duration_s:.1f}s {r.error.value if r.error else 'ok'}" for r in slow]
    return out


def inner_paramiko(spec: dict[str, Any]) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    import paramiko

    script = Path(spec["check_script"]).read_text() if spec.get("checks") else SCRIPT
    command = f"bash -c {shlex.quote(script)}"
    marker = b"@@ck-" if spec.get("checks") else b"node="
    # Parsed once and shared: parsing known_hosts per connection would cost the bare loop
    # ~25 ms of CPU per host at 256 entries, and we want its best case.
    known = paramiko.HostKeys(spec["known_hosts"])

    def one(host: str) -> tuple[str, tuple[bool, str]]:
        client = paramiko.SSHClient()
        client._system_host_keys = known  # read-only here; SSHClient has no public setter
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(spec["addresses"][host], port=spec["port"], username="root",
                           key_filename=spec["identity"], look_for_keys=False, allow_agent=False,
                           timeout=TIMEOUT_S, banner_timeout=TIMEOUT_S, auth_timeout=TIMEOUT_S)
            _, out, err = client.exec_command(command, timeout=30)
            text, _ = out.read(), err.read()
            status = out.channel.recv_exit_status()
            return host, ((status == 0 or bool(spec.get("checks"))) and marker in text, "")
        except Exception as exc:  # a bare loop: any failure is a failed node
            return host, (False, repr(exc))
        finally:
            client.close()

    with ThreadPoolExecutor(FANOUT) as pool:
        return _summary(dict(pool.map(one, spec["hosts"])))


def inner_transport(spec: dict[str, Any]) -> dict[str, Any]:
    """The least paramiko can do per node: TCP, ``Transport`` handshake, key auth, one command."""
    import socket
    from concurrent.futures import ThreadPoolExecutor

    import paramiko

    command = f"bash -c {shlex.quote(SCRIPT)}"
    key = paramiko.Ed25519Key.from_private_key_file(spec["identity"])

    def one(host: str) -> tuple[str, tuple[bool, str]]:
        t = None
        try:
            sock = socket.create_connection((spec["addresses"][host], spec["port"]), timeout=TIMEOUT_S)
            t = paramiko.Transport(sock)
            opts = t.get_security_options()
            opts.ciphers = [c for c in opts.ciphers if c.endswith("-gcm@openssh.com")] + [
                c for c in opts.ciphers if not c.endswith("-gcm@openssh.com")]
            t.start_client(timeout=TIMEOUT_S)
            t.auth_publickey("root", key)
            ch = t.open_session(timeout=TIMEOUT_S)
            ch.exec_command(command)
            out = b""
            while chunk := ch.recv(65536):
                out += chunk
            return host, (ch.recv_exit_status() == 0 and b"node=" in out, "")
        except Exception as exc:  # a bare loop: any failure is a failed node
            return host, (False, repr(exc))
        finally:
            if t is not None:
                t.close()

    with ThreadPoolExecutor(FANOUT) as pool:
        return _summary(dict(pool.map(one, spec["hosts"])))


def inner_asyncssh(spec: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    import asyncssh

    command = f"bash -c {shlex.quote(SCRIPT)}"

    async def one(sem: asyncio.Semaphore, host: str) -> tuple[str, tuple[bool, str]]:
        async with sem:
            try:
                async with asyncssh.connect(
                        spec["addresses"][host], port=spec["port"], username="root",
                        client_keys=[spec["identity"]], known_hosts=spec["known_hosts"],
                        agent_path=None, config=[], connect_timeout=TIMEOUT_S,
                        login_timeout=TIMEOUT_S) as conn:
                    r = await conn.run(command, timeout=30)
                    return host, (r.exit_status == 0 and "node=" in str(r.stdout), "")
            except Exception as exc:  # a bare loop: any failure is a failed node
                return host, (False, repr(exc))

    async def main() -> dict[str, tuple[bool, str]]:
        sem = asyncio.Semaphore(FANOUT)
        return dict(await asyncio.gather(*(one(sem, h) for h in spec["hosts"])))

    return _summary(asyncio.run(main()))


def _summary(results: dict[str, tuple[bool, str]]) -> dict[str, Any]:
    return {"ok": sum(ok for ok, _ in results.values()),
            "failed": {h: why for h, (ok, why) in results.items() if not ok}}


INNER = {"clusterkit": inner_clusterkit, "paramiko": inner_paramiko, "paramiko-transport": inner_transport,
         "asyncssh": inner_asyncssh}


if __name__ == "__main__":
    print(json.dumps(INNER[sys.argv[1]](json.loads(Path(sys.argv[2]).read_text()))))
