"""Preflight transport benchmark: clusterkit's SSHRunner next to clush, pdsh and bare loops.

Every tool runs the same remote command (``bash -c '<script>'``) once on every virtual node of
the SSH lab (tests/sshlab: real sshd processes in a network namespace of our own), one
connection and one command per node, in one run:

* ``clusterkit``  - ``SSHRunner.run_many`` with site defaults (fanout 64, connect 10 s)
* ``paramiko``    - a bare ``SSHClient`` thread-pool loop (64 threads, every timeout 10 s)
* ``asyncssh``    - a bare ``asyncio.gather`` + ``Semaphore(64)`` loop (timeouts 10 s)
* ``clush``       - ClusterShell's clush with its defaults (fanout 64, connect_timeout 15)
* ``pdsh``        - ``pdsh -R ssh`` with its defaults (fanout 32, connect timeout 10 s)
* ``pdsh-f64``    - the same with ``-f 64``, for a like-for-like fan-out

Each tool is a process of its own started inside the namespace; wall time is measured around
it and client CPU from ``wait4`` (the process and the children it reaped: ssh for
clush/pdsh).  Server CPU is what the lab's sshd processes spent meanwhile.  The second
scenario replaces 5% of the nodes with dead addresses (connection refused) and one with a
tarpit (accepts TCP, never sends the SSH banner): every tool then waits its connect timeout
once, and nothing should wait longer.

Needs root, sshd, clush, pdsh (see tests/sshlab).  ``--sizes 16,64`` for a quick run,
``--scenarios clean`` to skip the fault runs, ``--repeat 3`` to keep the best of three.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCRIPT = 'node-info; read -r load _ < /proc/loadavg; echo "load=$load"'
FANOUT = 64
TIMEOUT_S = 10
TOOLS = ("clusterkit", "paramiko", "asyncssh", "clush", "pdsh", "pdsh-f64")


# ----------------------------------------------------------------------------- inner loops
# Run as `preflight.py --inner TOOL SPEC.json` inside the lab; print {"ok": n, "failed": {}}.


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

    command = f"bash -c {shlex.quote(SCRIPT)}"
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
            return host, (out.channel.recv_exit_status() == 0 and b"node=" in text, "")
        except Exception as exc:  # a bare loop: any failure is a failed node
            return host, (False, repr(exc))
        finally:
            client.close()

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


INNER = {"clusterkit": inner_clusterkit, "paramiko": inner_paramiko, "asyncssh": inner_asyncssh}


# ----------------------------------------------------------------------------- outer driver


def _lab_module() -> Any:
    sys.path.insert(0, str(REPO))
    from tests.sshlab import lab  # the test lab is the bench's cluster

    return lab


def tool_argv(tool: str, spec_path: Path, spec: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of one tool (OpenSSH tools get the lab's config)."""
    from ClusterShell.NodeSet import NodeSet

    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    nodes = str(NodeSet.fromlist(spec["hosts"]))
    command = f"bash -c {shlex.quote(SCRIPT)}"
    if tool in INNER:
        return [sys.executable, __file__, "--inner", tool, str(spec_path)], env
    if tool == "clush":
        return ["/usr/bin/clush", "-w", nodes, "-o", f"-F {spec['ssh_config']}", command], env
    env["PDSH_SSH_ARGS_APPEND"] = f"-F {spec['ssh_config']}"
    fanout = ["-f", "64"] if tool == "pdsh-f64" else []
    return ["pdsh", "-R", "ssh", *fanout, "-w", nodes, command], env


def run_tool(lab: Any, tool: str, spec_path: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Run one tool inside the lab; wall, client CPU (wait4), server CPU, nodes answered."""
    argv, env = tool_argv(tool, spec_path, spec)
    out_path, err_path = spec_path.with_suffix(".out"), spec_path.with_suffix(".err")
    server0 = sshd_cpu(lab)
    with open(out_path, "w") as out_f, open(err_path, "w") as err_f:
        t0 = time.monotonic()
        proc = subprocess.Popen(lab.wrap(argv), env=env, stdout=out_f, stderr=err_f)
        # wait4, not Popen.wait: its rusage covers the tool and the children it reaped
        # (the ssh processes of clush and pdsh).
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    out, err = out_path.read_text(errors="replace"), err_path.read_text(errors="replace")
    slowest: list[str] = []
    if tool in INNER:
        summary = json.loads(out) if proc.returncode == 0 else {"ok": 0}
        ok, slowest = summary["ok"], summary.get("slowest", [])
    else:  # "host: node=host" lines (clush, pdsh prefix each line with the host)
        ok = len({line.split(":", 1)[0] for line in out.splitlines() if ": node=" in line})
    return {"tool": tool, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "server_cpu_s": sshd_cpu(lab) - server0, "ok": ok, "rc": proc.returncode,
            "stderr_tail": err[-300:], "slowest": slowest}


def sshd_cpu(lab: Any) -> float:
    """CPU of the lab's sshd listeners and the per-connection processes they reaped."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in lab.pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
    return total


def scenario_nodes(size: int, faults: bool) -> dict[str, str]:
    """``size`` hosts; with faults 5% of them dead (refused) and one a tarpit."""
    dead = max(1, round(size * 0.05)) if faults else 0
    tarpit = 1 if faults else 0
    width = len(str(size))
    names = [f"node{i:0{width}d}" for i in range(1, size + 1)]
    mapping = dict.fromkeys(names, "_runner_echo")
    # Faults spread evenly through the host list (all tools work through it in order): the
    # tarpit in the middle, the dead nodes between.
    if tarpit:
        mapping[names[size // 2]] = "@tarpit"
    for k in range(dead):
        i = (k * size) // dead + size // (2 * dead)
        i = i + 1 if mapping[names[i]] != "_runner_echo" else i
        mapping[names[i]] = "@refused"
    return mapping


def run_scenario(size: int, faults: bool, tools: list[str], repeat: int,
                 quiet: bool = False) -> list[dict[str, Any]]:
    labmod = _lab_module()
    mapping = scenario_nodes(size, faults)
    work = Path(tempfile.mkdtemp(prefix="ck-bench-"))
    lab = labmod.start_lab(mapping, work / "lab", log_level="ERROR")
    rows = []
    try:
        spec = {"hosts": list(mapping), "addresses": lab.addresses, "port": lab.port,
                "identity": str(lab.identity), "known_hosts": str(lab.known_hosts),
                "ssh_config": str(lab.ssh_config)}
        spec_path = work / "spec.json"
        spec_path.write_text(json.dumps(spec))
        for tool in tools:
            best = min((run_tool(lab, tool, spec_path, spec) for _ in range(repeat)),
                       key=lambda r: r["wall_s"])
            best.update(nodes=size, faults=faults, live=len(lab.nodes))
            rows.append(best)
            if not quiet:
                    print(f"  {'faults' if faults else 'clean':6} {size:4} {tool:10} "
                      f"{best['wall_s']:7.2f} s  cpu {best['cpu_s']:6.2f} s  "
                      f"ok {best['ok']}/{len(lab.nodes)}  {' '.join(best['slowest'])}",
                      file=sys.stderr, flush=True)
    finally:
        lab.stop()
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (f"{'scenario':9} {'nodes':>5} {'tool':10} {'wall s':>7} {'client cpu s':>12} "
            f"{'sshd cpu s':>10} {'answered':>9} {'vs clusterkit':>13}")
    print(head)
    print("-" * len(head))
    for r in rows:
        ck = next(x for x in rows if x["nodes"] == r["nodes"] and x["faults"] == r["faults"]
                  and x["tool"] == "clusterkit") if any(x["tool"] == "clusterkit" for x in rows) else r
        ratio = r["wall_s"] / ck["wall_s"] if ck["wall_s"] else float("nan")
        print(f"{'faults' if r['faults'] else 'clean':9} {r['nodes']:5} {r['tool']:10} "
              f"{r['wall_s']:7.2f} {r['cpu_s']:12.2f} {r['server_cpu_s']:10.2f} "
              f"{r['ok']:>4}/{r['live']:<4} {ratio:12.2f}x")


def print_verdict(rows: list[dict[str, Any]]) -> None:
    """The issue's targets at the largest clean size: >= 3x clush/pdsh, <= 15% off bare loops."""
    clean = [r for r in rows if not r["faults"]]
    if not clean:
        return
    size = max(r["nodes"] for r in clean)
    by = {r["tool"]: r["wall_s"] for r in clean if r["nodes"] == size}
    if "clusterkit" not in by:
        return
    ck = by["clusterkit"]
    print(f"\ntargets at {size} nodes (wall time, clean run):")
    for tool in ("clush", "pdsh", "pdsh-f64"):
        if tool in by:
            speed = by[tool] / ck
            print(f"  vs {tool:9}: {speed:4.2f}x faster   (target >= 3x: "
                  f"{'met' if speed >= 3 else f'missed by {3 - speed:.2f}x'})")
    for tool in ("paramiko", "asyncssh"):
        if tool in by:
            over = ck / by[tool] - 1
            print(f"  vs {tool:9}: {over:+6.1%}         (target <= +15%: "
                  f"{'met' if over <= 0.15 else f'missed by {over - 0.15:.1%}'})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="16,64,256", help="comma-separated node counts")
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"subset of {','.join(TOOLS)}")
    ap.add_argument("--scenarios", default="clean,faults",
                    help="clean (every node healthy), faults (5%% dead + one tarpit), or both")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool (best wall kept)")
    ap.add_argument("--json", action="store_true", help="print rows as JSON too")
    ap.add_argument("--no-warmup", action="store_true",
                    help="skip the untimed first pass (16 nodes) that warms caches")
    ap.add_argument("--inner", nargs=2, metavar=("TOOL", "SPEC"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.inner:
        tool, spec = args.inner
        print(json.dumps(INNER[tool](json.loads(Path(spec).read_text()))))
        return 0
    reason = _lab_module().lab_unavailable_reason()
    if reason:
        print(f"bench/preflight.py: {reason}", file=sys.stderr)
        return 2
    tools = [t for t in args.tools.split(",") if t]
    rows: list[dict[str, Any]] = []
    if not args.no_warmup:  # the first python/ssh start after a while pays for cold caches
        run_scenario(16, False, tools, 1, quiet=True)
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if not scenarios or set(scenarios) - {"clean", "faults"}:
        ap.error("--scenarios takes clean, faults or clean,faults")
    for faults in [s == "faults" for s in scenarios]:
        for size in (int(s) for s in args.sizes.split(",")):
            rows += run_scenario(size, faults, tools, args.repeat)
    print_table(rows)
    print_verdict(rows)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
