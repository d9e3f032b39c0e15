"""How SSHRunner reads an OpenSSH config and a site's ssh section (no network needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.config.schema import SSH
from clusterkit.nodes.transport import ErrorKind, NodeFailure, SSHRunner

CONFIG = """\
Host gpu*
    HostName %h.cluster.example
    User svc
    Port 2222
    IdentityFile ~/keys/gpu_ed25519
    ProxyJump login

Host login
    HostName login.cluster.example
    User jumper

Host chained
    ProxyJump alice@bastion:2200,login

Host direct
    HostName 127.0.0.9
    ProxyJump none

Host legacy
    ProxyCommand nc %h %p

Host *
    IdentitiesOnly yes
    UserKnownHostsFile ~/custom_known_hosts
"""


@pytest.fixture()
def config(tmp_path: Path) -> str:
    path = tmp_path / "ssh_config"
    path.write_text(CONFIG)
    return str(path)


def test_host_settings_and_proxyjump_come_from_the_config(config: str) -> None:
    t = SSHRunner(ssh_config=config).resolve("gpu017")
    assert (t.hostname, t.port, t.user) == ("gpu017.cluster.example", 2222, "svc")
    assert t.identity_files[0].endswith("/keys/gpu_ed25519") and "~" not in t.identity_files[0]
    assert t.identities_only and t.known_hosts.endswith("/custom_known_hosts")
    assert t.hostkey_name == "[gpu017.cluster.example]:2222"
    assert t.jump is not None and (t.jump.hostname, t.jump.port, t.jump.user) == (
        "login.cluster.example", 22, "jumper")
    assert t.jump.hostkey_name == "login.cluster.example"


def test_a_proxyjump_list_is_a_chain_in_order(config: str) -> None:
    t = SSHRunner(ssh_config=config).resolve("chained")
    login = t.jump
    assert login is not None and login.hostname == "login.cluster.example"
    bastion = login.jump
    assert bastion is not None and (bastion.alias, bastion.port, bastion.user) == ("bastion", 2200, "alice")
    assert bastion.jump is None


def test_runner_settings_win_over_the_config_like_ssh_options(config: str) -> None:
    r = SSHRunner(ssh_config=config, user="root", port=22, jump_host="none",
                  identity_file="/k/id", known_hosts="/k/known")
    t = r.resolve("gpu001")
    assert (t.port, t.user, t.jump, t.known_hosts) == (22, "root", None, "/k/known")
    assert t.identity_files[0] == "/k/id"


def test_proxyjump_none_and_unsupported_proxycommand(config: str) -> None:
    r = SSHRunner(ssh_config=config)
    assert r.resolve("direct").jump is None
    with pytest.raises(NodeFailure) as err:
        r.resolve("legacy")
    assert err.value.kind is ErrorKind.CONFIG and "ProxyJump" in err.value.reason


def test_ssh_config_path_from_the_environment(config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_SSH_CONFIG", config)
    assert SSHRunner().resolve("gpu002").port == 2222
    monkeypatch.delenv("CLUSTERKIT_SSH_CONFIG")
    monkeypatch.setenv("HOME", "/nonexistent-home")
    assert SSHRunner().ssh_config_path == "/nonexistent-home/.ssh/config"


def test_site_defaults_do_not_hide_the_config_but_explicit_values_win(config: str) -> None:
    implicit = SSHRunner.from_site(SSH(), ssh_config=config)
    t = implicit.resolve("gpu003")
    assert t.port == 2222 and t.known_hosts.endswith("/custom_known_hosts")
    explicit = SSHRunner.from_site(SSH(port=22, known_hosts="/site/known", user="ops",
                                       connect_timeout_s=3, command_timeout_s=7, fanout=9),
                                   ssh_config=config, accept_new_host_keys=True)
    t = explicit.resolve("gpu003")
    assert (t.port, t.known_hosts, t.user) == (22, "/site/known", "ops")
    assert (explicit.connect_timeout_s, explicit.command_timeout_s, explicit.fanout) == (3, 7, 9)
    assert explicit.accept_new_host_keys is True


def test_a_named_config_that_does_not_exist_is_a_config_error(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nope"
    monkeypatch.setenv("CLUSTERKIT_SSH_CONFIG", str(missing))
    res = SSHRunner().run_many(["gpu001", "gpu002"], "true")
    for r in res.values():
        assert r.error is ErrorKind.CONFIG and r.reason == f"ssh config {missing}: no such file"
    # while a missing default ~/.ssh/config just means "no config"
    monkeypatch.delenv("CLUSTERKIT_SSH_CONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert SSHRunner().resolve("gpu001").hostname == "gpu001"


def test_include_lines_are_followed_like_openssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh" / "conf.d").mkdir(parents=True)
    (tmp_path / ".ssh" / "conf.d" / "10-gpu.conf").write_text("Host gpu*\n    Port 2201\n")
    (tmp_path / "abs.conf").write_text("Host login\n    User jumper\n")
    main = tmp_path / "ssh_config"
    main.write_text(f"Include conf.d/*.conf {tmp_path}/abs.conf\n\nHost *\n    User root\n")
    r = SSHRunner(ssh_config=str(main))
    assert (r.resolve("gpu7").port, r.resolve("gpu7").user) == (2201, "root")
    assert r.resolve("login").user == "jumper"


def test_the_stanza_index_answers_as_paramiko_does(tmp_path: Path) -> None:
    """One Host stanza per node (as a lab or a generated config has) plus wildcards, negations
    and a stanza naming two hosts: every lookup equals paramiko's own over the whole file."""
    import paramiko

    from clusterkit.nodes.transport.ssh_config import TargetResolver

    head = ("Host a*\n  User alice\n  IdentityFile ~/.ssh/a\n"
            "Host node0003 other\n  Port 2200\n  IdentityFile ~/.ssh/n3\n"
            "Host !node0004 node*\n  ProxyJump login\n"
            "Host node0004\n  User four\n")
    nodes = "".join(f"Host node{i:04d}\n  HostName 10.1.{i // 250}.{i % 250 + 1}\n" for i in range(512))
    text = head + nodes + "Host *\n  Port 2222\n  User root\n  UserKnownHostsFile /tmp/kh\n"
    path = tmp_path / "config"
    path.write_text(text)
    indexed = TargetResolver(ssh_config=str(path))._ssh_config()
    whole = paramiko.SSHConfig.from_text(text)
    for name in [f"node{i:04d}" for i in range(512)] + ["other", "a1", "zzz", "NODE0001", "node9999"]:
        assert dict(indexed.lookup(name)) == dict(whole.lookup(name)), name
    assert indexed.lookup("node0004")["user"] == "four" and "proxyjump" not in indexed.lookup("node0004")
