"""Tables at 80 columns and in pipes: key columns (job id, state, node names, the figures of
`plan`) are never cut; a pipe gets plain aligned columns, no box drawing.

Each command runs as a real process: in a pipe, and on a pseudo-terminal of 80 columns
(``COLUMNS=80``), which is where rich lays out its tables."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

BOX = set("│┃┏┓┗┛┡┩┣┫━┳┻╇└┘┌┐├┤┬┴┼")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
DATA = REPO / "tests" / "data" / "sites" / "slurm-22.05"


def _on_terminal(args: list[str], env: dict[str, str], columns: int = 80) -> str:
    """``clusterkit ARGS`` on a pseudo-terminal of ``columns`` columns: what the user sees."""
    primary, secondary = pty.openpty()
    full = {**os.environ, **env, "COLUMNS": str(columns), "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "clusterkit", *args], stdin=subprocess.DEVNULL,
                            stdout=secondary, stderr=subprocess.DEVNULL, env=full, cwd=REPO)
    os.close(secondary)
    chunks = []
    while True:
        ready, _, _ = select.select([primary], [], [], 60)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(primary, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not data:
            break
        chunks.append(data)
    os.close(primary)
    assert proc.wait(timeout=60) in (0, 1), args
    text = ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))  # a progress bar's last frame


def _in_pipe(args: list[str], env: dict[str, str]) -> str:
    p = subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True,
                       env={**os.environ, **env, "COLUMNS": "80"}, cwd=REPO, timeout=60)
    assert p.returncode in (0, 1), (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    return p.stdout


def _assert_plain_aligned(text: str, header: list[str]) -> list[list[str]]:
    """No box drawing; every row two blanks apart where the header's columns start; the cells."""
    assert not BOX & set(text), text
    lines = [line for line in text.splitlines() if line.strip()]
    head = next(i for i, line in enumerate(lines) if all(h in line.split() for h in header))
    starts = [lines[head].index(h) for h in header]
    rows = []
    for line in lines[head + 1:]:
        if len(line) < starts[-1]:
            break  # the lines after the table
        assert all(line[s - 2:s] == "  " for s in starts[1:] if s <= len(line)), (line, starts)
        rows.append([line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)])
    return rows


def _assert_fits(text: str, columns: int = 80) -> None:
    assert max(len(line.rstrip()) for line in text.splitlines()) <= columns, text


@pytest.fixture
def jobs_env(tmp_path: Path) -> dict[str, str]:
    """Three ended local jobs in a records directory of their own."""
    from clusterkit.scheduler.records import JobRecord, RecordStore

    env = {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")}
    store = RecordStore(root=tmp_path / "state" / "jobs")
    for n, (state, code) in enumerate([("COMPLETED", 0), ("FAILED", 1), ("CANCELLED", None)]):
        run = tmp_path / f"run{n}"
        run.mkdir()
        store.save(JobRecord(job_id=str(4242420 + n), scheduler="local", site="local",
                             site_source="site_configs/local.yaml", stage="single-node", launcher="torchrun",
                             job_name="ck-a-rather-long-training-job-name", nnodes=1, world_size=2,
                             command=["python", "train.py"], run_dir=str(run), script=str(run / "job.sh"),
                             submitted_at=f"2026-01-01T00:00:0{n}.000000Z", host="login1", plan={},
                             state=state, exit_code=code))
    return env


def test_status_keeps_job_ids_and_states_whole(jobs_env: dict[str, str]) -> None:
    piped = _in_pipe(["status", "--all"], jobs_env)
    rows = _assert_plain_aligned(piped, ["JOB", "SITE", "NAME", "STAGE", "LAUNCHER", "NODES", "STATE",
                                         "EXIT", "ELAPSED", "SUBMITTED"])
    assert [(r[0], r[6]) for r in rows] == [("4242422", "CANCELLED"), ("4242421", "FAILED"), ("4242420", "COMPLETED")]
    assert all(r[2] == "ck-a-rather-long-training-job-name" for r in rows)
    shown = _on_terminal(["status", "--all"], jobs_env)
    _assert_fits(shown)
    assert "…" not in shown
    # the name is one word: never split; too wide for all columns, the least useful are left out
    assert shown.count("ck-a-rather-long-training-job-name") == 3
    assert "(left out: LAUNCHER, STAGE, SITE, SUBMITTED; --json has them)" in shown.splitlines()
    wide = _on_terminal(["status", "--all"], jobs_env, columns=140)
    assert "left out" not in wide and re.search(r"^JOB\s+SITE\s+NAME\s+STAGE\s+LAUNCHER", wide, re.M), wide
    for job, state in (("4242420", "COMPLETED"), ("4242421", "FAILED"), ("4242422", "CANCELLED")):
        assert re.search(rf"^{job}\b.*\b{state}\b", shown, re.M), shown


def test_plan_keeps_its_figures_whole() -> None:
    args = ["plan", "--site", "ib-h100", "--model-params", "7B"]
    piped = _in_pipe(args, {})
    rows = _assert_plain_aligned(piped, ["setup", "launcher", "size", "stage", "GiB/GPU", "GiB/node", "fits"])
    assert len(rows) >= 5 and all(r[-1] in ("yes", "no: GPU", "no: host") for r in rows), piped
    assert any(r[0] == "FSDP full shard" and r[2] == "1 node x 8 GPUs (8 GPUs)" for r in rows), piped
    shown = _on_terminal(args, {})
    assert "…" not in shown
    table = [line for line in shown.splitlines() if re.search(r"\b(yes|no: GPU|no: host)\s*$", line)]
    assert len(table) == len(rows)
    _assert_fits("\n".join(table))
    # at 80 columns the stage is left out (said below the table); the rest stays
    assert "(left out: stage; --json has them)" in shown.splitlines()
    # each row's figures, launcher and verdict as the pipe printed them, uncut
    for line, row in zip(table, rows, strict=True):
        for cell in (row[1], row[4], row[5], row[6]):
            assert f" {cell}" in f" {line}", (cell, line)
    # setup and size wrap at spaces: every word of theirs is whole on some line
    words = {w for r in rows for w in (r[0] + " " + r[2]).split()}
    start = shown.index("setup")
    shown_words = set(shown[start:].split())
    assert words <= shown_words, words - shown_words


def test_sites_list_keeps_names_and_node_lists_whole() -> None:
    piped = _in_pipe(["sites", "list"], {})
    rows = _assert_plain_aligned(piped, ["site", "from", "scheduler", "nodes", "gpus/node", "fabric", "description"])
    assert ["ib-h100", "./site_configs", "slurm", "gpu[001-064]"] in [r[:4] for r in rows], piped
    shown = _on_terminal(["sites", "list"], {})
    _assert_fits(shown)
    assert re.search(r"^ib-h100\s+slurm\s+gpu\[001-064\]\s+8\s+infiniband\s+64 x 8 H100", shown, re.M), shown
    # the description folds at spaces: every folded line holds whole words of a description, and
    # most hold several (a narrow column may leave one long word alone)
    at = next(line.index("description") for line in shown.splitlines() if "description" in line)
    folded = [line[at:].strip() for line in shown.splitlines() if line.startswith(" " * at)]
    words = {w for r in rows for w in r[-1].split()}
    assert folded and all(set(f.split()) <= words for f in folded), (folded, words)
    assert sum(" " in f for f in folded) >= len(folded) / 2, shown


def test_preflight_keeps_node_names_whole() -> None:
    piped = _in_pipe(["preflight", "--site", "local"], {})
    assert not BOX & set(piped)
    assert re.search(r"^(OK|WARN|FAILED)\s+\S+", piped, re.M), piped
    shown = _on_terminal(["preflight", "--site", "local"], {})
    table = shown[shown.index("status"):]
    _assert_fits(table)
    import socket

    host = socket.gethostname()
    node = "localhost" if host not in table else host
    assert re.search(rf"^(ok|warn|failed)\s+{re.escape(node)}\s", table, re.M), table


def test_drift_lines_are_never_cut(tmp_path: Path) -> None:
    # the captured Slurm 22.05.8 listings through the scontrol stand-in (no live controller here)
    site = tmp_path / "tb.yaml"
    site.write_text((REPO / "site_configs" / "testbed.yaml").read_text())
    env = {"PATH": f"{REPO / 'tests' / 'hostile' / 'standin'}{os.pathsep}{os.environ['PATH']}",
           "CK_STANDIN_DATA": str(DATA), "CK_STANDIN_NODES": str(DATA / "show-node-o-down-drain.txt")}
    piped = _in_pipe(["sites", "drift", str(site)], env)
    shown = _on_terminal(["sites", "drift", str(site)], env)
    assert not BOX & set(piped) and "node3: IDLE+DRAIN (bad gpu" in piped
    assert [line.rstrip() for line in piped.splitlines()] == [line.rstrip() for line in shown.splitlines() if line]


def test_status_all_fits_80_columns_with_elapsed_time_and_reason(tmp_path: Path) -> None:
    """A user's usual job names: the state, exit code, elapsed time and reason all fit 80 columns."""
    import os
    import time

    from clusterkit.cli.jobtable import table_rows
    from clusterkit.scheduler.records import JobRecord, RecordStore

    env = {"CLUSTERKIT_STATE_DIR": str(tmp_path / "state")}
    store = RecordStore(root=tmp_path / "state" / "jobs")
    submitted = time.time() - 3723
    ended = [("COMPLETED", 0, None), ("FAILED", 1, "setup step 2 failed (exit 3)")]
    for n, (state, code, reason) in enumerate(ended):
        run = tmp_path / f"run{n}"
        run.mkdir()
        job_id = str(4242430 + n)
        (run / f"{job_id}.result").write_text(f"{code}\n")
        os.utime(run / f"{job_id}.result", (submitted + 3723, submitted + 3723))   # ended 1:02:03 after submit
        store.save(JobRecord(job_id=job_id, scheduler="local", site="local", site_source="site_configs/local.yaml",
                             stage="single-node", launcher="torchrun", job_name="ck-train", nnodes=1, world_size=2,
                             command=["python", "train.py"], run_dir=str(run), script=str(run / "job.sh"),
                             submitted_at=time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(submitted)),
                             host="login1", plan={}, state=state, exit_code=code, reason=reason))
    shown = _on_terminal(["status", "--all"], env)
    _assert_fits(shown)
    assert re.search(r"^JOB\s.*NAME\s+.*STATE\s+EXIT\s+ELAPSED\s+REASON", shown, re.M), shown
    assert re.search(r"^4242431\s.*ck-train\s.*FAILED\s+1\s+1:02:03\s+setup\b", shown, re.M), shown
    assert re.search(r"^\s+failed\s*$|\(exit 3\)", shown, re.M), shown   # the reason, wrapped at its spaces
    assert re.search(r"^4242430\s.*ck-train\s.*COMPLETED\s+0\s+1:02:03", shown, re.M), shown
    row = {"job_id": "7", "site": "s", "name": "n", "stage": "multi-node", "launcher": "torchrun", "nodes": 4,
           "state": "RUNNING", "stale": False, "exit_code": None, "signal": None, "restarts": 2, "reason": None,
           "submitted_at": "2026-01-01T00:00:00Z", "ended_at": None}
    (cells,) = table_rows([row], [False])
    assert cells[9] == 2   # RESTARTS
