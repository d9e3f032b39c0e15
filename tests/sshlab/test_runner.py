"""SSHRunner against real sshd nodes in the lab: good nodes, every kind of bad node, host
keys, ProxyJump, auth, timeouts, fan-out and Ctrl-C.

The runner runs in a subprocess inside the lab's namespace (drive_runner.py), as
``clusterkit preflight`` does.  Durations are checked only against the configured timeouts,
with wide margins: the point is "bounded by our timeout, not paramiko's 15 s banner default
or the kernel's 130 s of SYN retries", not speed (speed is bench/preflight.py's job).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .lab import BLACKHOLE, REFUSED, TARPIT, SSHLab

DRIVER = Path(__file__).resolve().parent / "drive_runner.py"
NODES = [f"n{i:02d}" for i in range(1, 9)]
LAB_NODES = {**{n: "_runner_echo" for n in NODES}, "login": "_runner_echo",
             "dead01": REFUSED, "tarpit01": TARPIT, "hole01": BLACKHOLE}


@pytest.fixture(scope="module")
def runner_lab(sshlab_factory: Any) -> SSHLab:
    # DEBUG1: sshd then logs the direct-tcpip requests that prove ProxyJump was used.
    return sshlab_factory(LAB_NODES, log_level="DEBUG1")


def drive(lab: SSHLab, hosts: list[str], script: str, *, timeout_s: float = 10,
          fanout: int | None = None, env: dict[str, str] | None = None,
          **options: Any) -> dict[str, Any]:
    """Run SSHRunner inside the lab; return the driver's JSON (results by host)."""
    options.setdefault("known_hosts", str(lab.known_hosts))
    options.setdefault("connect_timeout_s", 2)
    req = {"runner": "ssh", "hosts": hosts, "script": script, "options": options,
           "timeout_s": timeout_s, "fanout": fanout}
    proc = lab.run([sys.executable, str(DRIVER), json.dumps(req)], capture_output=True,
                   text=True, timeout=120, env=env or lab.env())
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr  # paramiko's noise must not leak
    return json.loads(proc.stdout)


def log_text(lab: SSHLab) -> str:
    return "".join(p.read_text(errors="replace") for p in lab.sshd_logs())


def test_each_node_runs_the_script_once_with_its_own_data(runner_lab: SSHLab) -> None:
    before = log_text(runner_lab)
    out = drive(runner_lab, NODES, 'node-info; echo "to stderr" >&2; exit 0')
    assert out["order"] == NODES and out["interrupted"] is False
    for host in NODES:
        r = out["results"][host]
        assert (r["ok"], r["exit_status"], r["error"], r["reason"]) == (True, 0, None, "")
        # the node's own data: its name (from the address it was reached on) and sysroot
        assert r["stdout"] == f"node={host}\nprofile=_runner_echo\n"
        assert r["stderr"] == "to stderr\n"
    new = log_text(runner_lab)[len(before):]
    for host in NODES:  # one connection and one command per node
        addr = runner_lab.addresses[host]
        assert len(re.findall(rf"Connection from \S+ port \d+ on {re.escape(addr)} port", new)) == 1
    assert new.count("Starting session: forced-command") == len(NODES)
    assert out["lingering_threads"] == []


def test_exit_status_output_and_quoting_survive(runner_lab: SSHLab) -> None:
    script = "printf '%s|' \"a'b\" '$(touch /tmp/x)' 'sp ace'; echo; echo bad >&2; exit 7"
    r = drive(runner_lab, ["n01"], script)["results"]["n01"]
    assert r["stdout"] == "a'b|$(touch /tmp/x)|sp ace|\n"
    assert (r["exit_status"], r["ok"], r["reachable"], r["error"]) == (7, False, True, None)
    assert r["stderr"] == "bad\n"


def test_dead_tarpit_and_blackhole_nodes_fail_alone_within_the_timeouts(runner_lab: SSHLab) -> None:
    hosts = ["n01", "dead01", "tarpit01", "hole01", "n02"]
    out = drive(runner_lab, hosts, "node-info", timeout_s=10, connect_timeout_s=1.5)
    res = out["results"]
    assert res["n01"]["ok"] and res["n02"]["ok"]
    assert res["dead01"]["error"] == "refused"
    assert "connection refused" in res["dead01"]["reason"]
    assert res["tarpit01"]["error"] == "timeout"
    assert "no SSH banner" in res["tarpit01"]["reason"]
    assert res["hole01"]["error"] == "timeout"
    assert "no TCP connection" in res["hole01"]["reason"]
    for host in ("dead01", "tarpit01", "hole01"):
        assert not res[host]["reachable"] and res[host]["exit_status"] is None
        # bounded by connect_timeout_s=1.5, not paramiko's 15 s / the kernel's ~130 s: a bound only
        # a run without the connect timeout reaches, not a guess of how slow a loaded machine is
        assert res[host]["duration_s"] < 15
    assert out["wall_s"] < 15


def test_unresolvable_name_is_a_dns_error(runner_lab: SSHLab) -> None:
    if runner_lab.netns is None:
        pytest.skip("outside a namespace a name lookup could leave the machine")
    r = drive(runner_lab, ["no-such-node.invalid"], "true")["results"]["no-such-node.invalid"]
    assert r["error"] == "dns" and "no-such-node.invalid" in r["reason"]


def test_unknown_host_key_is_refused_and_not_stored(runner_lab: SSHLab, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    r = drive(runner_lab, ["n01"], "node-info", known_hosts=str(known))["results"]["n01"]
    assert r["error"] == "hostkey-unknown"
    assert f"[{runner_lab.addresses['n01']}]:{runner_lab.port}" in r["reason"]
    assert "SHA256:" in r["reason"] and "--accept-new-host-keys" in r["reason"]
    assert r["stdout"] == "" and known.read_text() == ""
    out = drive(runner_lab, NODES, "true", known_hosts=str(known))
    assert {r["error"] for r in out["results"].values()} == {"hostkey-unknown"}
    assert out["lingering_threads"] == []  # refused connections are closed, not left to time out


def test_accept_new_stores_unknown_keys_openssh_style(runner_lab: SSHLab, tmp_path: Path) -> None:
    known = tmp_path / "ssh" / "known_hosts"  # directory missing too, as on a fresh account
    out = drive(runner_lab, ["n01", "n02"], "node-info", known_hosts=str(known),
                accept_new_host_keys=True)
    assert all(r["ok"] for r in out["results"].values())
    lines = sorted(known.read_text().splitlines())
    assert lines == sorted(f"[{runner_lab.addresses[h]}]:{runner_lab.port} "
                           f"{runner_lab.host_key_line}" for h in ("n01", "n02"))
    # OpenSSH itself accepts the stored entries
    ssh = runner_lab.run(["ssh", "-F", str(runner_lab.ssh_config), "-o",
                          f"UserKnownHostsFile={known}", "n01", "true"], capture_output=True)
    assert ssh.returncode == 0, ssh.stderr
    # and a second run without accept-new trusts them
    again = drive(runner_lab, ["n01", "n02"], "true", known_hosts=str(known))
    assert all(r["ok"] for r in again["results"].values())


def test_changed_host_key_is_refused_even_with_accept_new(runner_lab: SSHLab, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    fake = " ".join(Path(f"{other}.pub").read_text().split()[:2])
    known = tmp_path / "known_hosts"
    known.write_text(f"[{runner_lab.addresses['n01']}]:{runner_lab.port} {fake}\n")
    text = known.read_text()
    for accept in (False, True):
        r = drive(runner_lab, ["n01"], "node-info", known_hosts=str(known),
                  accept_new_host_keys=accept)["results"]["n01"]
        assert r["error"] == "hostkey-changed" and "differs" in r["reason"]
        assert r["stdout"] == ""
    assert known.read_text() == text


def test_ssh_config_from_the_environment_gives_user_port_key_and_known_hosts(
        runner_lab: SSHLab) -> None:
    # No known_hosts/identity given: UserKnownHostsFile, IdentityFile, User and Port all come
    # from the config named by CLUSTERKIT_SSH_CONFIG.
    out = drive(runner_lab, ["n03"], 'echo "$USER"', known_hosts=None)
    r = out["results"]["n03"]
    assert r["ok"] and r["stdout"] == "root\n"


def test_proxyjump_through_the_login_node(runner_lab: SSHLab, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    jumped = ["n04", "n05", "n06"]
    config.write_text("".join(f"Host j-{h}\n  HostName {runner_lab.addresses[h]}\n"
                              f"  ProxyJump login\n\n" for h in jumped)
                      + runner_lab.ssh_config.read_text())
    before = log_text(runner_lab)
    out = drive(runner_lab, [f"j-{h}" for h in jumped], "node-info", ssh_config=str(config))
    for h in jumped:
        r = out["results"][f"j-{h}"]
        assert r["ok"] and r["stdout"].startswith(f"node={h}\n"), r
    new = log_text(runner_lab)[len(before):]
    for h in jumped:  # the login node's sshd opened the forwarded connections
        assert re.search(rf"request_direct_tcpip: originator \S+ port \d+, target "
                         rf"{re.escape(runner_lab.addresses[h])} port {runner_lab.port}", new)
    login = runner_lab.addresses["login"]  # one shared connection to the login node
    assert len(re.findall(rf"Connection from \S+ port \d+ on {re.escape(login)} port", new)) == 1


def test_proxyjump_failures_are_reported_per_node(runner_lab: SSHLab, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(f"Host j-dead\n  HostName {runner_lab.addresses['dead01']}\n"
                      f"  ProxyJump login\n\nHost via-dead\n  HostName {runner_lab.addresses['n01']}\n"
                      f"  ProxyJump dead01\n\n" + runner_lab.ssh_config.read_text())
    out = drive(runner_lab, ["j-dead", "via-dead"], "true", ssh_config=str(config))
    assert out["results"]["j-dead"]["error"] == "refused"
    assert "jump host could not open" in out["results"]["j-dead"]["reason"]
    assert out["results"]["via-dead"]["error"] == "refused"
    assert out["results"]["via-dead"]["reason"].startswith("jump host dead01:")


def test_a_key_the_node_does_not_accept_is_an_auth_error(runner_lab: SSHLab, tmp_path: Path) -> None:
    wrong = tmp_path / "id_wrong"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    config = tmp_path / "ssh_config"
    config.write_text(runner_lab.ssh_config.read_text().replace(
        f"IdentityFile {runner_lab.identity}", f"IdentityFile {wrong}"))
    r = drive(runner_lab, ["n01"], "true", ssh_config=str(config))["results"]["n01"]
    assert r["error"] == "auth" and str(wrong) in r["reason"] and "root@n01" in r["reason"]


def test_an_encrypted_key_without_agent_is_explained(runner_lab: SSHLab, tmp_path: Path) -> None:
    locked = tmp_path / "id_locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", str(locked)],
                   check=True)
    r = drive(runner_lab, ["n01"], "true", identity_file=str(locked),
              ssh_config=str(_config_without_identity(runner_lab, tmp_path)))["results"]["n01"]
    assert r["error"] == "auth" and "encrypted" in r["reason"]


def _config_without_identity(lab: SSHLab, tmp_path: Path) -> Path:
    config = tmp_path / "noident_config"
    config.write_text(lab.ssh_config.read_text().replace(f"    IdentityFile {lab.identity}\n", ""))
    return config


def test_agent_keys_are_used(runner_lab: SSHLab, tmp_path: Path) -> None:
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        env = runner_lab.env(SSH_AUTH_SOCK=str(sock))
        for _ in range(100):
            if sock.exists():
                break
            subprocess.run(["sleep", "0.02"])
        subprocess.run(["ssh-add", "-q", str(runner_lab.identity)], env=env, check=True,
                       capture_output=True)
        config = _config_without_identity(runner_lab, tmp_path)
        config.write_text(config.read_text().replace("IdentitiesOnly yes", "IdentitiesOnly no"))
        r = drive(runner_lab, ["n02"], "node-info", ssh_config=str(config),
                  env=env)["results"]["n02"]
        assert r["ok"], r
    finally:
        agent.terminate()
        agent.wait()


def test_a_hung_command_times_out_alone_and_keeps_its_partial_output(runner_lab: SSHLab) -> None:
    script = 'echo started; if [ "$CLUSTERKIT_LAB_NODE" = n02 ]; then sleep 60; fi; echo done'
    out = drive(runner_lab, ["n01", "n02", "n03"], script, timeout_s=1.5)
    res = out["results"]
    assert res["n01"]["ok"] and res["n03"]["ok"] and res["n01"]["stdout"] == "started\ndone\n"
    hung = res["n02"]
    assert hung["error"] == "command-timeout" and hung["reachable"] and not hung["ok"]
    assert hung["stdout"] == "started\n" and "1.5 s" in hung["reason"]
    # 1.5 s, not the 60 s sleep: a bound only a run that waited for the sleep reaches, not a guess
    # of how long a loaded machine takes for the rest
    assert hung["duration_s"] < 60 and out["wall_s"] < 60


def test_fanout_bounds_how_many_nodes_run_at_once(runner_lab: SSHLab) -> None:
    # Each node reports when its command started and ended (server clock); at most `fanout`
    # of those intervals may overlap at any instant, and with fanout 2 some do overlap.  With
    # fanout 1 each command sleeps, to give a runner that ignores the bound the chance to show it
    # (a slow machine cannot make a bounded runner overlap).  With fanout 2 each command marks its
    # start and ends once two have marked theirs (at most 30 s, which only a runner that never
    # runs two side by side reaches), not after a sleep a slow start of the second may outlast.
    marks = runner_lab.workdir / "fanout-marks"
    marks.mkdir()
    scripts = {1: 'date +%s.%N; sleep 0.8; date +%s.%N',
               2: (f'date +%s.%N; touch {marks}/"$CLUSTERKIT_LAB_NODE"; for i in $(seq 600); do '
                   f'[ "$(ls {marks} | wc -l)" -ge 2 ] && break; sleep 0.05; done; date +%s.%N')}
    for fanout in (1, 2):
        out = drive(runner_lab, NODES[:4], scripts[fanout], fanout=fanout, timeout_s=60)
        spans = [tuple(map(float, r["stdout"].split())) for r in out["results"].values()]
        events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
        live = peak = 0
        for _, step in events:
            live += step
            peak = max(peak, live)
        assert peak == fanout, (fanout, spans)


def test_ctrl_c_returns_what_finished_and_flags_the_rest(runner_lab: SSHLab) -> None:
    script = 'if [ "$CLUSTERKIT_LAB_NODE" = n01 ]; then echo quick; else sleep 60; fi'
    req = {"runner": "ssh", "hosts": NODES[:4], "script": script, "timeout_s": 120,
           "options": {"known_hosts": str(runner_lab.known_hosts), "connect_timeout_s": 2}}
    proc = runner_lab.popen([sys.executable, str(DRIVER), json.dumps(req)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()  # "done n01": one node has finished
    assert first.strip() == "done n01"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=20)  # returns promptly, not after 60 s
    assert proc.returncode == 0, stderr
    out = json.loads(stdout)
    assert out["interrupted"] is True and out["order"] == NODES[:4]
    assert out["results"]["n01"]["ok"] and out["results"]["n01"]["stdout"] == "quick\n"
    for host in NODES[1:4]:
        assert out["results"][host]["error"] == "interrupted"


def test_importing_the_runner_module_does_not_import_paramiko() -> None:
    code = "import sys, clusterkit.nodes.transport; print('paramiko' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_lab_stops_everything_it_started(sshlab_factory: Any, tmp_path: Path) -> None:
    from .lab import _alive, start_lab

    lab = start_lab({"s1": "_runner_echo", "s2": "_runner_echo", "tp": TARPIT}, tmp_path / "lab")
    try:
        out = drive(lab, ["s1", "s2"], "sleep 60", timeout_s=1)  # leaves sleeps behind
        assert {r["error"] for r in out["results"].values()} == {"command-timeout"}
        marker = f"CLUSTERKIT_SYSROOT={lab.workdir}/".encode()
        assert _lab_processes(marker)  # the abandoned remote commands still run...
    finally:
        lab.stop()
    assert not _lab_processes(marker)  # ...until the lab stops
    assert not any(_alive(pid) for pid in lab.pids)  # (zombies wait for init to reap them)
    if lab.netns:
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert lab.netns not in names


def _lab_processes(marker: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_known_hosts_with_markers_wildcards_and_a_bad_line(runner_lab: SSHLab, tmp_path: Path) -> None:
    """@cert-authority and malformed lines are skipped, wildcard patterns match, @revoked is honoured."""
    addr = runner_lab.addresses["n01"]
    prefix = addr.rsplit(".", 1)[0]
    known = tmp_path / "known_hosts"
    known.write_text(f"@cert-authority *.cluster {runner_lab.host_key_line}\n"
                     "this line is not a known_hosts entry\n"
                     f"n99 ssh-ed25519 AAAA-not-base64\n"
                     f"[{prefix}.*]:{runner_lab.port} {runner_lab.host_key_line}\n")
    out = drive(runner_lab, ["n01"], "true", known_hosts=str(known))
    assert out["results"]["n01"]["ok"], out["results"]["n01"]
    # a negated pattern excludes the host again: unknown, not trusted
    known.write_text(f"[{prefix}.*]:{runner_lab.port},![{addr}]:{runner_lab.port} {runner_lab.host_key_line}\n")
    assert drive(runner_lab, ["n01"], "true", known_hosts=str(known))["results"]["n01"]["error"] == "hostkey-unknown"
    # @revoked wins over a matching entry, and over --accept-new-host-keys
    known.write_text(f"@revoked * {runner_lab.host_key_line}\n[{addr}]:{runner_lab.port} {runner_lab.host_key_line}\n")
    for accept in (False, True):
        r = drive(runner_lab, ["n01"], "true", known_hosts=str(known), accept_new_host_keys=accept)["results"]["n01"]
        assert r["error"] == "hostkey-changed" and "@revoked" in r["reason"]


def test_known_hosts_skipped_lines_are_warned_about(runner_lab: SSHLab, tmp_path: Path) -> None:
    from clusterkit.nodes.transport.ssh_keys import KnownHosts

    known = tmp_path / "known_hosts"
    known.write_text(f"@cert-authority *.cluster {runner_lab.host_key_line}\nnot an entry\n"
                     f"n01.cluster {runner_lab.host_key_line}\n")
    db = KnownHosts()
    db.load(str(known))
    assert [w.split(": ", 1)[0] for w in db.warnings] == [f"{known}:1", f"{known}:2"]
    assert db.lookup("n01.cluster") and db.lookup("N01.CLUSTER") and not db.lookup("n01")
