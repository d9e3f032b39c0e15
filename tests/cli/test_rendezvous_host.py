"""The site key ``network.rendezvous_host``: checked as data (one of suffix or interface, each a
name and nothing more), rendered as the run directory's ``rendezvous-host.sh`` that the job script
runs on the batch host (never on the submit host), and run again by the supervisor for a
relaunch's head (``clusterkit.supervise.head``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clusterkit.supervise import head
from tests.conftest import REPO, assert_one_line_error


def _site(tmp_path: Path, rdzv: str, base: str = "testbed") -> str:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nextends: {REPO / 'site_configs' / (base + '.yaml')}\nnetwork:\n"
                    f"  rendezvous_host: {rdzv}\n")
    return str(path)


@pytest.mark.parametrize("rdzv,needle", [
    ("{suffix: i, interface: ib0}", "give one of suffix"),
    ("{}", "give one of suffix"),
    ('{suffix: "i; reboot"}', "suffix 'i; reboot': 1-63 letters"),
    ('{interface: "ib0$(id)"}', "interface 'ib0$(id)': a network interface name"),
    ("{interface: averyveryverylongname}", "a network interface name, 1-15"),
    ("{suffix: i, port: 1}", "port"),
])
def test_a_bad_rendezvous_host_is_refused_at_its_line(ck, tmp_path: Path, rdzv: str, needle: str) -> None:
    result = ck("sites", "validate", _site(tmp_path, rdzv))
    assert_one_line_error(result, 2, "s.yaml:", "network.rendezvous_host", needle)


def _render(ck, site: str, tmp_path: Path, *args: str) -> Path:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    result = ck("render", "--site", site, "--stage", "multi-node", "--nodes", "2", *args, "--out", str(out),
                "--", "python", "train.py")
    assert result.code == 0, result.err
    return out


@pytest.mark.parametrize("launcher,word", [("torchrun", '--rdzv-endpoint "$CK_HEAD:$CK_PORT"'),
                                           ("accelerate", '--main_process_ip "$CK_HEAD"'),
                                           ("deepspeed", '--master_addr "$CK_HEAD"'),
                                           ("colossalai", '--master_addr "$CK_HEAD"'),
                                           ("srun", "export MASTER_ADDR=$CK_HEAD")])
def test_every_launcher_rendezvous_at_the_named_host(ck, tmp_path: Path, launcher: str, word: str) -> None:
    extra = ("--set", "max_restarts=0") if launcher == "colossalai" else ()
    run = _render(ck, _site(tmp_path, "{suffix: -ib}"), tmp_path, "--launcher", launcher, *extra)
    script = (run / "job.sbatch").read_text()
    # CK_HEAD (which every launcher and MASTER_ADDR read) becomes the named host before any of them
    named = script.index('CK_HEAD=$(bash "$CK_RDZV_RESOLVE" "$CK_HEAD_NODE") || CK_HEAD=""')
    assert named < script.index("export MASTER_ADDR=$CK_HEAD") and named < script.index(word)
    assert (run / "rendezvous-host.sh").read_text().count("printf '%s\\n' \"$ck_node\"-ib\n") == 1


def test_an_interface_is_never_read_on_the_submit_host(ck, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # no `ip` on the submit host's PATH: rendering does not need one
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    run = _render(ck, _site(tmp_path, "{interface: ib0}"), tmp_path)
    text = (run / "rendezvous-host.sh").read_text()
    assert "ip -o -4 addr show dev ib0)" in text and '--nodelist="$ck_node"' in text


def test_a_site_without_the_key_has_no_script(ck, tmp_path: Path) -> None:
    run = _render(ck, "testbed", tmp_path)
    assert not (run / "rendezvous-host.sh").exists()
    assert "CK_RDZV_RESOLVE" not in (run / "job.sbatch").read_text()


def test_a_local_site_keeps_loopback(ck, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = ck("render", "--site", _site(tmp_path, "{suffix: i}", base="local"), "--out", str(out),
                "--", "python", "train.py")
    assert result.code == 0, result.err
    assert "export CK_HEAD=127.0.0.1" in (out / "job.sbatch").read_text()
    assert not (out / "rendezvous-host.sh").exists()


# ---- the supervisor's relaunch: the same script for the new head
def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "rendezvous-host.sh"
    path.write_text(body)
    return str(path)


def test_a_relaunch_head_without_the_key_is_its_node() -> None:
    assert head.rendezvous_host("gpu7", {}, print) == "gpu7"


def test_a_relaunch_head_goes_through_the_jobs_script(tmp_path: Path) -> None:
    env = {**os.environ, "CK_RDZV_RESOLVE": _script(tmp_path, 'printf "%si\\n" "$1"\n')}
    assert head.rendezvous_host("gpu7", env, print) == "gpu7i"


@pytest.mark.parametrize("body,why", [("echo 'no address' >&2; exit 1\n", "no address"),
                                      ("echo '10.0.0.1; reboot'\n", "printed"), ("exit 0\n", "printed")])
def test_a_relaunch_head_the_script_cannot_name_is_not_relaunched(tmp_path: Path, body: str, why: str) -> None:
    said: list[str] = []
    env = {**os.environ, "CK_RDZV_RESOLVE": _script(tmp_path, body)}
    assert head.rendezvous_host("gpu7", env, said.append) is None
    assert len(said) == 1 and "no rendezvous host for gpu7" in said[0] and why in said[0], said


def test_a_site_hosts_template_from_before_the_key_is_refused(ck, tmp_path: Path) -> None:
    tdir = tmp_path / "tpl"
    tdir.mkdir(mode=0o755)
    text = (REPO / "templates" / "job-hosts.sbatch.j2").read_text()
    start = text.index("{% if plan.basis.site.network.rendezvous_host %}")
    (tdir / "job-hosts.sbatch.j2").write_text(text[:start] + text[text.index("{% endif %}", start) + 11:])
    site = tmp_path / "s.yaml"
    site.write_text(f"name: s\nextends: {REPO / 'site_configs' / 'testbed.yaml'}\ntemplates: {tdir}\n"
                    "network:\n  rendezvous_host: {suffix: i}\n")
    result = ck("render", "--site", str(site), "--out", str(tmp_path / "run"), "--", "python", "t.py")
    assert_one_line_error(result, 2, "rendezvous-host.sh", "the launchers would rendezvous at the head's own name")
    assert not (tmp_path / "run").exists()
