"""Preflight transport benchmark: clusterkit's SSHRunner next to clush, pdsh and bare loops.

Every tool runs the same remote command (``bash -c '<script>'``) once on every virtual node of
the SSH lab (tests/sshlab: real sshd processes in a network namespace of our own), one
connection and one command per node, in one run:

* ``clusterkit``  - ``SSHRunner.run_many`` with site defaults (fanout 64, connect 10 s)
* ``ck-cli``      - the whole CLI, ``clusterkit preflight --site LAB --json``: start-up, site
  loading, the full check script on every node, parsing and the report (fanout 64)
* ``clush-checks``- clush running that same full check script (what the CLI sends)
* ``paramiko``    - a bare ``SSHClient`` thread-pool loop (64 threads, every timeout 10 s)
* ``paramiko-checks`` - the same loop running the CLI's full check script: the remote work
  of ``ck-cli`` without clusterkit's start-up, parsing and report
* ``paramiko-transport`` - paramiko's floor: a bare ``Transport`` per node (no ``SSHClient``,
  the key parsed once, host keys not checked, AES-GCM first), 64 threads, the light command
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

Nodes use the lab's ``healthy`` profile (fake nvidia-smi, ibstat, mounts), so the CLI's checks
pass.  Client CPU per host is the tool's CPU (its reaped children included: worker processes,
ssh) divided by the nodes.  The load average is printed with the table: the machine may be
shared.

clusterkit's modules are compiled to bytecode first, as ``pip install`` does: an editable
install run with ``PYTHONDONTWRITEBYTECODE`` set would otherwise compile every module on
every start (about 0.25 s of CPU per run here).

Needs root, sshd, clush, pdsh (see tests/sshlab).  ``--sizes 16,64`` for a quick run,
``--scenarios clean`` to skip the fault runs, ``--repeat 3`` to keep the best of three.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from preflight_loops import INNER, SCRIPT  # bench/ is the script's own directory, first on sys.path

REPO = Path(__file__).resolve().parents[1]
LOOPS = Path(__file__).with_name("preflight_loops.py")   # the bare loops, a process each
TOOLS = ("ck-cli", "clusterkit", "paramiko", "paramiko-checks", "paramiko-transport", "asyncssh", "clush",
         "clush-checks", "pdsh", "pdsh-f64")
PROFILE = "healthy"
SITE = """\
name: lab
scheduler: {{kind: slurm, partition: gpu}}
nodes: {{nodelist: "{nodelist}", gpus_per_node: 8, gpu_model: H100}}
ssh: {{port: {port}, known_hosts: "{known_hosts}", connect_timeout_s: 10, command_timeout_s: 30, fanout: 64}}
software: {{driver_min: "535.104", cuda: "12.4"}}
network:
  fabric: infiniband
  hcas: [mlx5_0, mlx5_1, mlx5_2, mlx5_3, mlx5_4, mlx5_5, mlx5_6, mlx5_7]
  port_rate_gbps: 400
storage:
  - {{path: /lustre/scratch, type: lustre, min_free_gb: 0.001, use: [data, checkpoints], timeout_s: 2}}
  - {{path: /home, type: nfs, use: [home]}}
preflight: {{policy: exclude, max_excluded_fraction: 0.9}}
"""


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
        return [sys.executable, str(LOOPS), tool, str(spec_path)], env
    if tool == "paramiko-checks":
        checks = spec_path.with_name("spec-checks.json")
        checks.write_text(json.dumps({**spec, "checks": True}))
        return [sys.executable, str(LOOPS), "paramiko", str(checks)], env
    if tool == "ck-cli":
        env["CLUSTERKIT_SSH_CONFIG"] = spec["ssh_config"]
        return [sys.executable, "-m", "clusterkit", "preflight", "--site", spec["site"], "--json"], env
    if tool == "clush-checks":
        check = f"bash -c {shlex.quote(Path(spec['check_script']).read_text())}"
        return ["/usr/bin/clush", "-w", nodes, "-o", f"-F {spec['ssh_config']}", check], env
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
    if tool in INNER or tool == "paramiko-checks":
        summary = json.loads(out) if proc.returncode == 0 else {"ok": 0}
        ok, slowest = summary["ok"], summary.get("slowest", [])
    elif tool == "ck-cli":  # nodes whose checks ran (the report's reachable nodes)
        report = json.loads(out) if out.strip().startswith("{") else {"nodes": []}
        ok = sum(1 for n in report["nodes"] if n["reachable"])
    elif tool == "clush-checks":  # "host: <section marker>" lines: the script ran there
        ok = len({line.split(":", 1)[0] for line in out.splitlines() if ": @@ck-" in line})
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
    mapping = dict.fromkeys(names, PROFILE)
    # Faults spread evenly through the host list (all tools work through it in order): the
    # tarpit in the middle, the dead nodes between.
    if tarpit:
        mapping[names[size // 2]] = "@tarpit"
    for k in range(dead):
        i = (k * size) // dead + size // (2 * dead)
        i = i + 1 if mapping[names[i]] != PROFILE else i
        mapping[names[i]] = "@refused"
    return mapping


def _cli_files(work: Path, lab: Any, hosts: list[str]) -> dict[str, str]:
    """The lab's site file for the CLI, and the check script the CLI sends (for clush-checks)."""
    from ClusterShell.NodeSet import NodeSet

    from clusterkit.config.load import load_site
    from clusterkit.preflight import catalogue
    from clusterkit.vocab import stage_for_nodes

    site_path = work / "lab.yaml"
    site_path.write_text(SITE.format(nodelist=str(NodeSet.fromlist(hosts)), port=lab.port,
                                     known_hosts=lab.known_hosts))
    site = load_site(str(site_path))
    checks = catalogue.select_checks(catalogue.Expectations.from_site(site, stage_for_nodes(len(hosts))))
    script = work / "checks.sh"
    script.write_text(checks.script())
    return {"site": str(site_path), "check_script": str(script)}


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
        spec.update(_cli_files(work, lab, list(mapping)))
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
    head = (f"{'scenario':9} {'nodes':>5} {'tool':12} {'wall s':>7} {'client cpu s':>12} {'ms/host':>7} "
            f"{'sshd cpu s':>10} {'answered':>9} {'vs ck-cli':>9}")
    print(head)
    print("-" * len(head))
    for r in rows:
        ck = next((x for x in rows if x["nodes"] == r["nodes"] and x["faults"] == r["faults"]
                   and x["tool"] == "ck-cli"), None)
        ratio = f"{r['wall_s'] / ck['wall_s']:8.2f}x" if ck and ck["wall_s"] else f"{'-':>9}"
        print(f"{'faults' if r['faults'] else 'clean':9} {r['nodes']:5} {r['tool']:12} "
              f"{r['wall_s']:7.2f} {r['cpu_s']:12.2f} {1000 * r['cpu_s'] / r['nodes']:7.1f} "
              f"{r['server_cpu_s']:10.2f} {r['ok']:>4}/{r['live']:<4} {ratio}")


def print_verdict(rows: list[dict[str, Any]]) -> None:
    """The goals at each clean size: the whole CLI within 1.3x of a bare paramiko pool, at most
    0.35x of clush running the same checks, and at most 4 ms of client CPU per host."""
    for size in sorted({r["nodes"] for r in rows if not r["faults"]}):
        by = {r["tool"]: r for r in rows if r["nodes"] == size and not r["faults"]}
        if "ck-cli" not in by:
            continue
        ck = by["ck-cli"]
        print(f"\ngoals at {size} nodes (clean run, whole CLI):")
        if "paramiko" in by:
            x = ck["wall_s"] / by["paramiko"]["wall_s"]
            print(f"  vs bare paramiko pool : {x:5.2f}x   (goal <= 1.3x: {'met' if x <= 1.3 else 'missed'})")
        if "paramiko-checks" in by:
            x = ck["wall_s"] / by["paramiko-checks"]["wall_s"]
            print(f"  vs the pool running the CLI's check script: {x:5.2f}x   (goal <= 1.3x: "
                  f"{'met' if x <= 1.3 else 'missed'}; the same remote work on both sides)")
        if "clusterkit" in by and "paramiko" in by:
            x = by["clusterkit"]["wall_s"] / by["paramiko"]["wall_s"]
            print(f"  runner vs bare pool, same light command: {x:5.2f}x")
        if "clush-checks" in by:
            x = ck["wall_s"] / by["clush-checks"]["wall_s"]
            print(f"  vs clush, same checks : {x:5.2f}x   (goal <= 0.35x: {'met' if x <= 0.35 else 'missed'})")
        ms = 1000 * ck["cpu_s"] / size
        print(f"  client CPU per host   : {ms:5.1f} ms (goal <= 4 ms: {'met' if ms <= 4 else 'missed'})")
        for pool in ("paramiko-checks", "paramiko"):
            if pool in by:
                own = 1000 * (ck["cpu_s"] - by[pool]["cpu_s"]) / size
                print(f"    of which the bare pool ({pool}) spends {1000 * by[pool]['cpu_s'] / size:.1f} ms: "
                      f"the CLI's CPU minus the pool's {own:.1f} ms")
                break
        if "paramiko" in by and "paramiko-checks" in by:
            light, full = by["paramiko"]["server_cpu_s"], by["paramiko-checks"]["server_cpu_s"]
            print(f"  nodes' sshd CPU per host: {1000 * full / size:.1f} ms for the check script, "
                  f"{1000 * light / size:.1f} ms for the light command (the same 2 cores serve both sides)")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


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
    args = ap.parse_args(argv)
    reason = _lab_module().lab_unavailable_reason()
    if reason:
        print(f"bench/preflight.py: {reason}", file=sys.stderr)
        return 2
    tools = [t for t in args.tools.split(",") if t]
    compileall.compile_dir(str(REPO / "toolkit" / "clusterkit"), quiet=1)  # as pip install does
    rows: list[dict[str, Any]] = []
    load0 = loadavg()
    if not args.no_warmup:  # the first python/ssh start after a while pays for cold caches
        run_scenario(16, False, tools, 1, quiet=True)
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if not scenarios or set(scenarios) - {"clean", "faults"}:
        ap.error("--scenarios takes clean, faults or clean,faults")
    for faults in [s == "faults" for s in scenarios]:
        for size in (int(s) for s in args.sizes.split(",")):
            rows += run_scenario(size, faults, tools, args.repeat)
    print(f"load average before: {load0}, after: {loadavg()}; {os.cpu_count()} CPUs")
    print_table(rows)
    print_verdict(rows)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
