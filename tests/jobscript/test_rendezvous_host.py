"""The site's ``network.rendezvous_host`` in the job script as bash runs it (tests/jobscript
harness): the launchers' rendezvous host (``CK_HEAD``, ``MASTER_ADDR``) is the head's name with
the suffix, or the head's IPv4 address on the interface, read on the head (here when the batch
host is the head, else in a one-task step on it; ``ip`` is the real tool, on ``lo``); an
interface without an address ends the job with its reason before any rank starts."""

from __future__ import annotations

from pathlib import Path

from tests.jobscript.conftest import site_file

RECORD = 'printf "%s %s %s\\n" "$MASTER_ADDR" "$CK_HEAD" "$CK_HEAD_NODE" > "$JS_DIR/rdzv"'


def _recorded(j) -> list[str]:  # type: ignore[no-untyped-def]
    j.await_ranks()
    return (j.work / "rdzv").read_text().split()


def test_a_suffix_names_the_head_on_the_other_network(job, tmp_path: Path) -> None:
    site = site_file(tmp_path, network__rendezvous_host={"suffix": "i"})
    j = job("--setup", RECORD, site=str(site)).start()
    assert _recorded(j) == ["node1i", "node1i", "node1"]
    j.kill()


def test_an_interface_is_read_on_the_batch_host_when_it_is_the_head(job, tmp_path: Path) -> None:
    site = site_file(tmp_path, network__rendezvous_host={"interface": "lo"})
    j = job("--setup", RECORD + '; cp "$JS_DIR/srun.argv" "$JS_DIR/before" 2>/dev/null || true',
            site=str(site), SLURMD_NODENAME="node1").start()
    assert _recorded(j) == ["127.0.0.1", "127.0.0.1", "node1"]
    assert not (j.work / "before").exists(), "an srun step ran before the launch: the head is this host"
    j.kill()


def test_an_interface_is_read_in_a_step_on_the_head_otherwise(job, tmp_path: Path) -> None:
    site = site_file(tmp_path, network__rendezvous_host={"interface": "lo"})
    j = job("--setup", RECORD + '; cp "$JS_DIR/srun.argv" "$JS_DIR/before"',
            site=str(site), SLURMD_NODENAME="node2").start()
    assert _recorded(j) == ["127.0.0.1", "127.0.0.1", "node1"]
    step = (j.work / "before").read_text().splitlines()
    assert "--nodelist=node1" in step and "--ntasks=1" in step
    assert step[-7:] == ["ip", "-o", "-4", "addr", "show", "dev", "lo"]
    j.kill()


def test_an_interface_without_an_address_ends_the_job_before_the_ranks(job, tmp_path: Path) -> None:
    site = site_file(tmp_path, network__rendezvous_host={"interface": "ckno0"})
    j = job(site=str(site), SLURMD_NODENAME="node1").start()
    assert j.wait() == 1, j.log()
    assert j.reason() == ("no rendezvous host for the head node1 (network.rendezvous_host; the line above says "
                          "why)\n"), j.log()
    assert "cannot read the addresses of ckno0 on node1" in j.log()
    assert j.rank_pids() == []
