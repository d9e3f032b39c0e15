"""The Slurm client seam with real processes: bounded, leniently decoded output, timeouts, a
missing client; and the real Slurm clients (squeue, sbatch through submitit, scancel, scontrol)
against a controller that is not there: one error, exit 3, from every command.

The dead controller is a slurm.conf naming port 1 on loopback: the real clients fail at once
with their own words ("Unable to contact slurm controller (connect failure)").
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from clusterkit import slurmclient
from clusterkit.errors import ExitCode, SlurmUnreachable
from clusterkit.scheduler.records import RecordStore

from ..conftest import CLI, assert_one_line_error
from ..submit.test_state_faults import _record

PY = sys.executable


def test_output_is_bounded_and_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurmclient, "OUTPUT_LIMIT", 1000)
    # a client that prints 1 MB, bytes that are not UTF-8, and terminal escapes
    code = "import sys; sys.stdout.buffer.write(b'ok\\xff\\x1b[31mred\\x07\\n' + b'x' * 1_000_000)"
    answer = slurmclient.run([PY, "-c", code], 30)
    assert answer.returncode == 0
    first = answer.stdout.splitlines()[0]
    assert first == "ok\ufffd[31mred"                      # ESC and BEL gone, the bad byte replaced
    assert answer.stdout.endswith("[999013 more bytes not kept]\n")
    assert len(answer.stdout) < 1100


def test_a_client_that_hangs_is_killed_at_its_timeout(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    # the "client" and a child it started: both must be gone after the timeout
    code = (f"import subprocess, time; p = subprocess.Popen(['sleep', '300']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(300)")
    answer = slurmclient.run([PY, "-c", code], 2)
    assert answer.returncode == slurmclient.TIMED_OUT and "no answer in 2 s" in answer.stderr
    child = int(pidfile.read_text())
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    assert slurmclient.unreachable(answer) is not None


def test_a_missing_client_is_an_answer() -> None:
    answer = slurmclient.run(["no-such-slurm-client-here"], 5)
    assert (answer.returncode, answer.stderr) == (slurmclient.NOT_FOUND, "no-such-slurm-client-here: command not found")
    with pytest.raises(SlurmUnreachable) as err:
        slurmclient.require(["no-such-slurm-client-here"])
    assert err.value.exit_code is ExitCode.UNREACHABLE


@pytest.fixture
def dead_controller(tmp_path: Path) -> dict[str, str]:
    if shutil.which("squeue") is None or shutil.which("sbatch") is None:
        pytest.skip("needs the Slurm client commands (tests/run.sh installs them)")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=gone\nSlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=2\nGresTypes=gpu\n")
    return {"SLURM_CONF": str(conf), "CLUSTERKIT_STATE_DIR": str(tmp_path / "state")}


def test_real_clients_say_unreachable(dead_controller: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in dead_controller.items():
        monkeypatch.setenv(key, value)
    for argv in (["squeue", "-h"], ["scontrol", "show", "config"], ["scancel", "12345"]):
        answer = slurmclient.run(argv, 30)
        assert answer.returncode != 0
        assert slurmclient.unreachable(answer) is not None, (argv, answer.stderr)


def test_submit_and_status_both_exit_3(dead_controller: dict[str, str], tmp_path: Path) -> None:
    cli = CLI(env=dead_controller, process=True, cwd=tmp_path, timeout=120)
    sub = cli("submit", "--site", "testbed", "--gpus-per-node", "1", "--launcher", "srun", "--skip-preflight",
              "--out", str(tmp_path / "run"), "--", "true")
    assert sub.code == 3, sub.err
    assert_one_line_error(sub, 3, "cannot reach Slurm controller")
    store = RecordStore(Path(dead_controller["CLUSTERKIT_STATE_DIR"]) / "jobs")
    assert store.files() == []  # no job id, no record
    store.save(_record(tmp_path, "4242"))
    st = cli("status", "4242")
    assert st.code == 3, st.err
    assert "cannot reach Slurm controller" in st.err and "4242" in st.out

    cancel = cli("cancel", "4242", "--now")
    assert cancel.code == 3, cancel.err
    assert_one_line_error(cancel, 3, "cannot reach Slurm controller")


def test_sites_init_exits_3(dead_controller: dict[str, str], tmp_path: Path) -> None:
    cli = CLI(env=dead_controller, process=True, cwd=tmp_path, timeout=120)
    res = cli("sites", "init", "gone", "--from-slurm", "--out", str(tmp_path / "gone.yaml"))
    assert res.code == 3, res.err
    assert_one_line_error(res, 3, "cannot reach Slurm controller")
    assert not (tmp_path / "gone.yaml").exists()


def test_subprocess_is_not_used_elsewhere_for_slurm_clients() -> None:
    """Every Slurm client clusterkit runs goes through the seam (sbatch is submitit's)."""
    root = Path(__file__).resolve().parents[2] / "toolkit" / "clusterkit"
    clients = ("squeue", "sacct", "scontrol", "scancel", "sinfo", "srun")
    offenders = []
    for path in root.rglob("*.py"):
        if path.name == "slurmclient.py":
            continue
        text = path.read_text()
        starts = any(f"subprocess.{call}(" in text for call in ("run", "Popen", "call", "check_output", "check_call"))
        if starts and any(f'"{c}"' in text for c in clients):
            offenders.append(str(path.relative_to(root)))
    assert offenders == []
